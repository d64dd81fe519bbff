"""Outputs are written atomically: complete or not at all, the target untouched when writing fails."""

import os

import pytest

from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.core.files import atomic_write


def test_atomic_write_replaces_only_when_complete(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    real_fsync = os.fsync

    def failing_fsync(fd):                      # a full disk at the last moment
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        atomic_write(target, b"new content")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]
    monkeypatch.setattr(os, "fsync", real_fsync)
    atomic_write(target, "new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["out.bin"]


def test_tflite_output_over_its_input_is_written_whole(tmp_path, monkeypatch, capsys):
    from tvm_memsched import zoo

    model = tmp_path / "m.tflite"
    model.write_bytes(zoo.tflite("swiftnet_like", "int8"))
    before = model.read_bytes()

    def failing_fsync(fd):
        raise OSError(27, "File too large")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    rc = cli_main(["tflite", str(model), "-o", str(model), "--offline-plan", "-q", "--force"])
    assert rc == 2 and "cannot write" in capsys.readouterr().err
    assert model.read_bytes() == before              # the input survives a failed write
    assert os.listdir(tmp_path) == ["m.tflite"]


@pytest.mark.parametrize("text,message", [
    ('{"tensors": [{"name": "a\\nb", "bytes": 9223372036854775808}], "ops": [], "inputs": ["a\\nb"]}',
     "above the limit of 2**62"),
    ('{"tensors": [{"name": "a\\ud800", "bytes": 2}], "ops": [], "inputs": ["a\\ud800"]}', "lone surrogate"),
    ('{"tensors": ' + "[" * 50000 + "]" * 50000 + ', "ops": []}', "nested too deeply"),
    ('{"tensors": [{"name": "x", "bytes": ' + "9" * 5000 + '}], "ops": []}', "not usable JSON"),
])
def test_hostile_graph_json_gives_one_line(tmp_path, capsys, text, message):
    path = tmp_path / "g.json"
    path.write_text(text)
    assert cli_main(["schedule", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
