"""Relax DataflowBlock <-> core Graph.

Every binding of a DataflowBlock becomes one op of a :class:`~tvm_memsched.core.Graph`:

* a tensor-producing call (an operator right after import, a ``call_tir`` after
  FuseTIR, a packed call) writes new tensors, one per tensor leaf of its type;
  at kernel level its ``workspace_bytes`` is the PrimFunc's internal allocation;
* a binding that creates no memory (a plain var alias, a tuple, a tuple get-item,
  a match-cast, a view such as ``R.reshape`` / ``R.memory.view``, a shape or
  scalar computation) writes a zero-byte token instead; whoever uses its result
  reads the token (for ordering) and the real tensors behind it (so they stay
  live as long as the alias is used);
* vars from earlier blocks are graph inputs; function parameters and constants
  are not activations and are not modelled;
* vars used after the block (its outputs) are graph outputs.

Scheduling the graph and putting the bindings in the op order is therefore
always a valid reordering of the block.

Example
-------
>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([1, 4, 8, 8], "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         a = bb.emit(relax.op.nn.relu(x), "a")
...         b = bb.emit(relax.op.nn.relu(a), "b")
...         y = bb.emit_output(relax.op.add(a, b), "y")
...     _ = bb.emit_func_output(y)
>>> bg = block_to_graph(bb.finalize()["main"], 0)
>>> bg.graph.num_ops, [t.bytes for t in bg.graph.tensors]
(3, [1024, 1024, 1024])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..core.errors import UnsupportedError
from ..core.graph import Graph, Op
from .ir import VIEW_OPS, call_tir_op, field_types, op_name, tensor_bytes

__all__ = ["BlockGraph", "block_to_graph", "function_graph", "reorder_block", "used_after_blocks"]


@dataclass
class BlockGraph:
    """A DataflowBlock's graph and the map from op names back to binding indices."""

    graph: Graph
    block: object
    binding_of_op: dict = field(default_factory=dict)

    def bindings_in(self, order) -> list:
        """The block's bindings in the given op order (names or ids)."""
        ids = self.graph.resolve_order(order)
        return [self.block.bindings[self.binding_of_op[self.graph.ops[v].name]] for v in ids]


def _free_vars(expr) -> list:
    return list(relax.analysis.free_vars(expr))


def used_after_blocks(func) -> list[set]:
    """For each block of ``func``'s body, the vars used in later blocks or the result."""
    blocks = list(func.body.blocks)
    later: set = set(_free_vars(func.body.body))
    out = [set() for _ in blocks]
    for k in range(len(blocks) - 1, -1, -1):
        out[k] = set(later)
        for b in blocks[k].bindings:
            later.update(_free_vars(b.value))
    return out


def _is_impure(value) -> bool:
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op):
        pure = value.op.get_attr("FPurity")
        return pure is not None and not bool(pure)
    return False


def block_to_graph(func, block_index: int, *, workspace=None, used_after: set | None = None,
                   name: str = "block", inplace=None) -> BlockGraph:
    """The graph of block ``block_index`` of ``func`` (see the module docstring).

    ``workspace``: a callable GlobalVar -> bytes for ``call_tir`` kernels (e.g.
    :class:`~tvm_memsched.relax.analysis.workspace.WorkspaceMeter`); None counts none.
    ``inplace``: an :class:`~tvm_memsched.relax.analysis.inplace.InplaceAnalyzer`; a single-output
    ``call_tir`` whose kernel may write its output over an input declares it (``Op.inplace``).
    ``used_after``: vars used after the block (default: computed from ``func``).

    Raises :class:`UnsupportedError` for dynamic shapes or impure calls.
    """
    block = func.body.blocks[block_index]
    if used_after is None:
        used_after = used_after_blocks(func)[block_index]
    if workspace is not None and hasattr(workspace, "prefetch"):      # every kernel's at once, side by side
        workspace.prefetch([b.value.args[0] for b in block.bindings if call_tir_op(b.value)])
    params = set(func.params)
    defined = {b.var: i for i, b in enumerate(block.bindings)}
    tensors: list[tuple[str, int]] = []
    ops: list[Op] = []
    inputs: dict = {}  # external var -> list of tensor names
    # per var: nested structure of tensor names ("t", [names]) or ("tuple", [structs]); and its token
    struct: dict = {}
    token: dict = {}
    binding_of_op: dict = {}

    def ext_struct(var):
        """Structure of a var defined outside the block (earlier blocks are graph inputs)."""
        if var in params:
            return ("t", [])  # caller-owned memory, never in our arena
        if not isinstance(getattr(var, "ty", None), (relax.TensorType, relax.TupleType)):
            return ("t", [])
        if var not in inputs:
            names = []
            for k, ty in enumerate(field_types(var.ty)):
                if isinstance(ty, relax.TensorType):
                    tname = f"in:{var.name}.{k}#{len(inputs)}"
                    tensors.append((tname, tensor_bytes(ty, f"block input '{var.name}'")))
                    names.append(tname)
            inputs[var] = names
        return ("t", list(inputs[var]))

    def roots(s) -> list[str]:
        if s[0] == "t":
            return list(s[1])
        out = []
        for f in s[1]:
            out.extend(roots(f))
        return out

    def struct_of(var):
        if var in struct:
            return struct[var]
        if var in defined:  # used before defined: an invalid block
            raise UnsupportedError(f"var '{var.name}' is used before its binding")
        return ext_struct(var)

    for i, b in enumerate(block.bindings):
        var, value = b.var, b.value
        vname = f"{i}:{var.name}"
        if _is_impure(value):
            raise UnsupportedError(f"binding '{var.name}' calls impure op '{value.op.name}' inside a dataflow block")
        used = [v for v in _free_vars(value) if not isinstance(v, tvm.ir.GlobalVar)]
        ins: list[str] = []
        for u in used:
            ins.extend(roots(struct_of(u)))
            if u in token:
                ins.append(token[u])
        kind = "alias"
        outs: list[str] = []
        ws = 0
        decl = []
        if isinstance(value, relax.Var):
            struct[var] = struct_of(value)
        elif isinstance(b, relax.MatchCast):  # match-cast of an expression: an alias of what it uses
            tokens = set(token.values())
            struct[var] = ("t", [t for t in ins if t not in tokens])
        elif isinstance(value, relax.Tuple):
            fields = []
            for f in value.fields:
                fields.append(struct_of(f) if isinstance(f, relax.Var) else ("t", []))
            struct[var] = ("tuple", fields)
        elif isinstance(value, relax.TupleGetItem):
            s = struct_of(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else ("t", [])
            struct[var] = s[1][value.index] if s[0] == "tuple" and value.index < len(s[1]) else s
        elif isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in VIEW_OPS:
            src = value.args[0]
            struct[var] = struct_of(src) if isinstance(src, relax.Var) else ("t", [])
        elif isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) \
                and value.op.name == "relax.call_tir_inplace":
            # outputs are written in place into the inputs named by inplace_indices
            args = list(value.args[1].fields) if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
            idx = [int(k) for k in value.attrs.inplace_indices]
            fields = [struct_of(args[k]) if k >= 0 and isinstance(args[k], relax.Var) else ("t", []) for k in idx]
            struct[var] = fields[0] if len(fields) == 1 else ("tuple", fields)
            kind = op_name(value)
        elif isinstance(value, tvm.ir.Call):
            kind = op_name(value)
            leaves = field_types(var.ty) if isinstance(var.ty, (relax.TensorType, relax.TupleType)) else []
            fields = []
            for k, ty in enumerate(leaves):
                if isinstance(ty, relax.TensorType):
                    tname = vname if len(leaves) == 1 else f"{vname}.{k}"
                    tensors.append((tname, tensor_bytes(ty, f"result of binding '{var.name}'")))
                    outs.append(tname)
                    fields.append(("t", [tname]))
                else:
                    fields.append(("t", []))
            if isinstance(var.ty, relax.TupleType):
                struct[var] = ("tuple", fields)
            else:
                struct[var] = fields[0] if fields else ("t", [])
            if workspace is not None and call_tir_op(value):
                ws = workspace(value.args[0])
            if inplace is not None and call_tir_op(value) and len(outs) == 1:
                decl = _inplace_decl(value, var, outs[0], inplace, struct_of)
        else:  # constants, shapes, prim values: no activation memory
            struct[var] = ("t", [])
        if not outs:
            tok = f"{vname}~"
            tensors.append((tok, 0))
            outs.append(tok)
            token[var] = tok
        seen = set()
        ins = [t for t in ins if not (t in seen or seen.add(t))]
        ops.append(Op(vname, ins, outs, ws, {"kind": kind, "binding": i}, inplace=decl))
        binding_of_op[vname] = i
    outputs: list[str] = []
    for b in block.bindings:
        if b.var in used_after or not isinstance(b.var, relax.DataflowVar):
            for t in roots(struct[b.var]):
                if t not in outputs:
                    outputs.append(t)
            if b.var in token and token[b.var] not in outputs:
                outputs.append(token[b.var])
    graph_inputs = [t for names in inputs.values() for t in names]
    graph = Graph(tensors, ops, graph_inputs, outputs, name=name)
    return BlockGraph(graph, block, binding_of_op)


def _inplace_decl(call, var, out_name: str, analyzer, struct_of) -> list:
    """``[(output, input, shift)]``: the input the kernel of ``call`` may write ``var`` over that would
    save the most bytes (the graph model takes one input per output)."""
    args = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
    best, best_saving = [], 0
    out_bytes = tensor_bytes(var.ty, "kernel output") if isinstance(getattr(var, "ty", None), relax.TensorType) else 0
    for i, _o, shift in analyzer.pairs(call.args[0], args + [var], 1):
        src = args[i]
        if not isinstance(src, relax.Var) or not isinstance(getattr(src, "ty", None), relax.TensorType):
            continue
        s = struct_of(src)
        if s[0] != "t" or len(s[1]) != 1:
            continue
        (tname,) = s[1]
        saving = min(out_bytes - shift, tensor_bytes(src.ty, "kernel input"))
        if saving > best_saving:
            best, best_saving = [(out_name, tname, shift)], saving
    return best


def function_graph(func, name: str = "main") -> Graph:
    """The graph of ``func``'s dataflow block (an imported model's ``main`` has one), named ``name``.

    Raises :class:`UnsupportedError` unless ``func`` has exactly one dataflow block.
    """
    blocks = [k for k, b in enumerate(func.body.blocks) if isinstance(b, relax.DataflowBlock)]
    if len(blocks) != 1:
        branches = any(isinstance(b.value, relax.If) for blk in func.body.blocks for b in blk.bindings) or \
            isinstance(func.body.body, relax.If)
        hint = ("; it branches at run time (If): if the condition comes from an input a deployment fixes, freeze "
                "it with --input-value NAME=VALUE") if branches else ""
        raise UnsupportedError(f"'{name}' has {len(blocks)} dataflow blocks; its graph needs exactly one{hint}")
    return block_to_graph(func, blocks[0], name=name).graph


def reorder_block(block, bindings) -> "relax.DataflowBlock":
    """A copy of ``block`` with its bindings in the given order."""
    return relax.DataflowBlock(list(bindings), block.span)
