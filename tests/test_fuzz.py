"""Seeded fuzzing of the two untrusted inputs: graph JSON and .tflite files.

Each mutant (truncation, bit flips, byte swaps, JSON field deletions and swaps,
hostile names with quotes, newlines, control characters and lone surrogates,
cycles, huge or negative numbers) goes through the CLI in-process. The only
acceptable outcomes: exit 0 with a result that verifies (a topological order
whose peak the simulator reproduces; a .tflite that reads back with the same
operators), or exit 2 with exactly one line on stderr. Never an exception, a
partial output file, or a changed input file.
"""

import copy
import hashlib
import json
import random

import pytest

from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.core.generators import random_dag
from tvm_memsched.core.io import graph_to_dict, load_graph

HOSTILE = ['a"b', "a\\b", "line\nbreak", "tab\there", "\x00nul", "\ud800lone", "*/ #include \"x.h\"", "é漢字", "",
           " ", "x" * 300]


def _check(rc, err, out_path, inp_path, digest):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc in (0, 2), (rc, err)
    assert "Traceback" not in err
    assert hashlib.sha256(inp_path.read_bytes()).hexdigest() == digest, "the input file changed"
    if rc == 2:
        assert len(lines) == 1, err
        assert not out_path.exists(), "a failed run left an output file"
    return rc == 0


# ------------------------------------------------------------ graph JSON
def _json_mutants(seed: int, n: int):
    rng = random.Random(seed)
    base = graph_to_dict(random_dag(9, seed=seed))
    text = json.dumps(base)
    for k in range(n):
        kind = k % 8
        if kind == 0:                                   # truncated text
            yield text[:rng.randrange(len(text))]
        elif kind == 1:                                 # flipped bytes
            b = bytearray(text.encode())
            for _ in range(rng.randint(1, 6)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            yield bytes(b).decode("utf-8", errors="replace")
        else:
            d = copy.deepcopy(base)
            ops, tensors = d["ops"], d["tensors"]
            op = rng.choice(ops)
            if kind == 2:                               # a field deleted
                target = rng.choice([d, op, rng.choice(tensors)])
                if target:
                    target.pop(rng.choice(sorted(target)), None)
            elif kind == 3:                             # hostile names, duplicates after sanitising
                t = rng.choice(tensors)
                old, new = t["name"], rng.choice(HOSTILE)
                t["name"] = new
                for o in ops:
                    o["inputs"] = [new if x == old else x for x in o["inputs"]]
                    o["outputs"] = [new if x == old else x for x in o["outputs"]]
                op["name"] = rng.choice(HOSTILE)
            elif kind == 4:                             # sizes: negative, huge, fractional, strings
                rng.choice(tensors)["size"] = rng.choice([-1, 2 ** 63, 2 ** 70, 1.5, "12", None, 10 ** 400])
            elif kind == 5:                             # a cycle: an op reads what a later op writes
                a, b = rng.sample(ops, 2)
                if b["outputs"]:
                    a["inputs"] = list(a["inputs"]) + [b["outputs"][0]]
            elif kind == 6:                             # unknown tensors, swapped fields
                op["inputs"] = list(op["inputs"]) + ["no such tensor"]
                if rng.random() < 0.5:
                    op["inputs"], op["outputs"] = op["outputs"], op["inputs"]
            else:                                       # values of the wrong type, deep nesting
                key = rng.choice(["ops", "tensors", "inputs", "outputs"])
                d[key] = rng.choice([{}, 3, "x", [[[[[]]]]], None, [None]])
            yield json.dumps(d, allow_nan=True) if kind != 4 else json.dumps(d).replace('"size": null', '"size": 1e999')


@pytest.mark.parametrize("seed", [0, 1])
def test_graph_json_mutants(tmp_path, capsys, seed):
    ok = 0
    for k, text in enumerate(_json_mutants(seed, 40)):
        inp, out = tmp_path / f"g{k}.json", tmp_path / f"o{k}.json"
        inp.write_text(text, encoding="utf-8", errors="surrogatepass")
        digest = hashlib.sha256(inp.read_bytes()).hexdigest()
        rc = cli_main(["schedule", str(inp), "-o", str(out), "--method", "auto", "--time-limit", "2", "-q"])
        if _check(rc, capsys.readouterr().err, out, inp, digest):
            g = load_graph(inp)
            res = json.loads(out.read_text())
            assert g.is_topological(res["order"])
            from tvm_memsched.core.simulate import peak_bytes

            assert peak_bytes(g, res["order"]) == res["peak_bytes"]
            ok += 1
    assert ok < 40                                      # the mutants are not all harmless


# ------------------------------------------------------------ .tflite
def _tflite_mutants(seed: int, n: int, buf: bytes):
    rng = random.Random(seed)
    for k in range(n):
        b = bytearray(buf)
        kind = k % 4
        if kind == 0:
            yield bytes(b[:rng.randrange(len(b))])
        elif kind == 1:
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            yield bytes(b)
        elif kind == 2:                                  # the flatbuffer's tables: the first kilobytes
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(min(len(b), 4096))
                b[i] = rng.randrange(256)
            yield bytes(b)
        else:
            i, j = sorted(rng.sample(range(len(b)), 2))
            w = min(16, j - i)
            b[i:i + w], b[j:j + w] = b[j:j + w], b[i:i + w]
            yield bytes(b)


def test_tflite_mutants(tmp_path, capsys):
    from tvm_memsched import zoo
    from tvm_memsched.tflite.reader import read_tflite

    buf = zoo.tflite("resnet", "int8")
    n_ops = read_tflite(buf).graph.num_ops
    accepted = 0
    for k, data in enumerate(_tflite_mutants(3, 36, buf)):
        inp, out = tmp_path / f"m{k}.tflite", tmp_path / f"o{k}.tflite"
        inp.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        rc = cli_main(["tflite", str(inp), "-o", str(out), "--offline-plan", "--time-limit", "2", "-q"])
        if _check(rc, capsys.readouterr().err, out, inp, digest):
            assert read_tflite(out.read_bytes()).graph.num_ops == n_ops
            accepted += 1
    assert accepted < 36
