"""The options of tvm_memsched's pipeline, one typed object for every entry point.

:class:`PipelineOptions` is a frozen dataclass holding every option of :func:`~tvm_memsched.relax.pipeline.pipeline`
with its default, type and help text. :func:`~tvm_memsched.relax.pipeline.pipeline`,
:class:`~tvm_memsched.relax.pipeline.MemschedPipeline`, :func:`~tvm_memsched.relax.pipeline.build`,
:func:`~tvm_memsched.relax.compare.compare`, the microcontroller export (:func:`tvm_memsched.micro.export`) and
the ``compare`` / ``micro`` commands all take it, so an option is written once: a field name is its command-line
flag (``time_limit`` <-> ``--time-limit``; a boolean that defaults to True <-> ``--no-NAME``), and the commands'
flags are generated from the fields (:func:`add_arguments`, :meth:`PipelineOptions.from_cli`).

Adding an option is one field here, e.g.::

    tuning_trials: int = _option(0, "MetaSchedule trials per kernel (0: no tuning)", type=int, metavar="N")

which makes ``PipelineOptions(tuning_trials=64)``, ``pipeline(target, tuning_trials=64)`` and the flag
``--tuning-trials N`` of ``compare`` and ``micro`` (``cli=("compare",)`` for one command only, ``cli=()`` with a
``python_only`` reason for none: a callable, pass objects, a dict of a pass's own options); a value check, if any,
goes in :func:`_validate`. Then read ``options.tuning_trials`` where it acts (:class:`MemschedPipeline`,
:func:`compare`; the micro export refuses by name every changed option not in its
``tvm_memsched.micro.builder.APPLIED_OPTIONS``).
tests/test_options.py covers a new field as it is (round trip, the commands' flags).

Example
-------
>>> opts = PipelineOptions(tradeoff="speed", time_limit=2.0)
>>> opts.to_cli_args()
['--time-limit', '2.0', '--tradeoff', 'speed']
>>> opts.replace(inplace=False).to_cli_args()
['--time-limit', '2.0', '--no-inplace', '--tradeoff', 'speed']
>>> PipelineOptions(tradeof="speed")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
tvm_memsched.relax.options.UnknownOptionError: unknown pipeline option 'tradeof' (did you mean 'tradeoff'?); ...
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass, field

from ..core.errors import MemschedError

__all__ = ["PipelineOptions", "OptionError", "UnknownOptionError", "add_arguments", "option_fields",
           "resolve_options", "REWRITE_POLICIES", "LAYOUT_CHOICES", "WORKSPACE_MODES", "TRADEOFFS"]

# The value sets below are the passes' own (tests/test_options.py checks they agree); written here so that this
# module, and with it the command's parser, needs no TVM.
#: ``tradeoff``: :class:`~tvm_memsched.transform.ShrinkWorkspace`'s modes
TRADEOFFS = ("memory", "balanced", "speed")
#: identity-rewrite policies (:class:`~tvm_memsched.relax.passes.identity_rewrite.IdentityRewrite`)
REWRITE_POLICIES = ("if-better", "always")
#: the ``layout`` option's values (None means "keep")
LAYOUT_CHOICES = ("auto", "keep", "NHWC", "NCHW")     # ConvolutionLayout's LAYOUTS
#: how the reorder measures kernel workspace (:class:`~tvm_memsched.relax.analysis.workspace.WorkspaceMeter`)
WORKSPACE_MODES = ("lowered", "tir", None)
#: the commands whose flags :func:`add_arguments` generates
COMMANDS = ("compare", "micro")


class OptionError(MemschedError, ValueError):
    """A pipeline option has a value it cannot take (the message names the option)."""


class UnknownOptionError(OptionError, TypeError):
    """A keyword that is no pipeline option (the message names it and the valid names)."""


def _option(default=None, help: str = "", *, off: str = "", cli=COMMANDS, flag: str | None = None, aliases=(),
            type=None, choices=None, metavar=None, const=None, python_only: str = "", factory=None):
    """A field of :class:`PipelineOptions`: its default, what it does (``help``; ``off``: what False does, for an
    option on by default), the commands that take it (``cli``; none: ``python_only`` says why) and how they
    spell it (``flag``, default ``--NAME`` or ``--no-NAME``; ``aliases``: older spellings; ``type``, ``choices``
    (or a function returning them), ``metavar``; ``const``: the value of the flag given without one)."""
    meta = {"help": help, "off": off, "cli": tuple(cli), "flag": flag, "aliases": tuple(aliases), "type": type,
            "choices": choices, "metavar": metavar, "const": const, "python_only": python_only}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _methods():
    from ..schedulers import available_methods

    return available_methods()


@dataclass(frozen=True, kw_only=True)
class PipelineOptions:
    """Every option of tvm_memsched's pipeline (see the module docs; ``help`` of each field in its metadata,
    :func:`option_fields`). Build one with keywords, change one with :meth:`replace`; values are checked when
    it is made (:class:`OptionError` naming the option)."""

    method: str = _option("auto", "scheduler of the reorder (MemoryAwareReorder; default auto)",
                          choices=_methods)
    time_limit: float | None = _option(None, "seconds per block for the scheduler's exact searches (default: the "
                                             "scheduler's own)", type=float, metavar="SECONDS")
    alignment: int | None = _option(None, "alignment of every tensor in the arena, a power of two (default 64 "
                                          "bytes for TVM's VM, 16 in a microcontroller export)",
                                    type=int, metavar="BYTES")
    reorder: bool = _option(True, "reorder the kernels for a lower peak (MemoryAwareReorder)",
                            off="keep TVM's order", cli=(),
                            python_only="pipeline()/build() only: compare and micro report our order")
    plan: bool = _option(True, "plan the arena with ArenaPlanMemory", off="keep TVM's StaticPlanBlockMemory",
                         cli=(), python_only="pipeline()/build() only: compare and micro report our plan")
    workspace: str | None = _option("lowered", "how the reorder measures kernel workspace: lowered (TVM's TIR "
                                               "pipeline), tir (the unlowered buffers) or None (not at all)",
                                    cli=(), python_only="the commands measure lowered workspace")
    exact_arena: bool = _option(True, "place the tensors with CP-SAT when the greedy placement misses the "
                                      "live-peak bound", off="keep the greedy tensor placement",
                                aliases=("--greedy-arena",))
    extra_passes: tuple = _option((), "passes run after FuseTIR (after ShrinkWorkspace)", cli=(),
                                  python_only="pass objects")
    progress: object = _option(None, "progress callback of the scheduler", cli=(),
                               python_only="a callable; the commands set it from --verbose / --quiet")
    rewrite: bool | str | dict = _option(False, "apply identity graph rewriting on our side first (a policy, "
                                                "default if-better)", choices=REWRITE_POLICIES, const="if-better")
    int8: bool = _option(True, "lower quantized operator groups to TFLite's exact integer kernels",
                         off="keep quantized models in TVM's float emulation")
    shrink_workspace: bool = _option(True, "schedule the kernels without full-size temporaries (padding inlined, "
                                           "epilogues per output element)",
                                     off="keep TVM's kernels as fusion writes them")
    shrink_constants: bool = _option(True, "store broadcast constants such as PReLU slopes at their small shape",
                                     off="keep constants as imported")
    inplace: bool = _option(True, "let a kernel output take over an input dying at the call wherever the "
                                  "kernel's TIR proves it safe",
                            off="never place a kernel output over a dying input")
    layout: str | None = _option("auto", "data layout of our convolutions: auto (default) runs them channels-last "
                                         "(NHWC) with in-place execution, where their outputs can trail their "
                                         "inputs through memory; keep leaves the model's own",
                                 choices=LAYOUT_CHOICES)
    tile: bool | dict = _option(False, "patch-tile the model's first stage first (PatchTiling; True or a dict of "
                                       "its options)", cli=(),
                                python_only="the commands' --tile / --tile-budget / --tile-grid / --tile-at tile "
                                            "the model file before import (app.models.add_tile_arguments)")
    inline_producers: bool | dict = _option(
        True, "compute a cheap element-wise producer used once (such as a pre-activation relu) inside its consumer",
        off="keep every element-wise producer a kernel and a tensor of its own")
    vectorize: bool = _option(True, "vectorise each kernel over its innermost output dimension in TIR (LLVM "
                                    "targets; VectorizeKernels): vector code also where the kernel runs in place",
                              off="leave vectorisation to LLVM")
    tradeoff: str = _option("memory", "kernel speed against kernel workspace: memory (default: least workspace; a "
                                      "convolution's padding read through a bounds test per multiply-accumulate), "
                                      "speed (padding computed in bands of rows, a little workspace), balanced "
                                      "(bands wherever live tensors plus workspace stay within --allowance of the "
                                      "live-tensor peak); the fast (banded) kernels run out of place",
                            choices=TRADEOFFS, cli=("compare",))
    allowance: float = _option(0.10, "with --tradeoff balanced: how far above the least-memory peak the faster "
                                     "kernels may take it, a fraction (default 0.1)",
                               type=float, metavar="FRACTION", cli=("compare",))
    affine_chains: bool | dict = _option(
        True, "fold per-channel affine chains (batch norms) into one bit-identical spelling without per-element "
              "square roots", off="keep per-channel affine chains as imported")
    absorb_transposes: bool = _option(True, "compute a convolution or pooling wrapped in transposes to and from "
                                            "channels-last channels-last",
                                      off="keep the transposes around convolutions and pooling")
    tune: int = _option(0, "tune the kernels with MetaSchedule, N measured candidates per kernel the database "
                           "lacks (0, default: no tuning; TuneKernels; host llvm targets only)",
                        type=int, metavar="TRIALS", cli=("compare",))
    tune_database: str | None = _option(None, "the MetaSchedule database directory, kept and reused across "
                                              "builds (default with --tune: ~/.cache/tvm_memsched/tuning)",
                                        metavar="DIR", cli=("compare",))
    tune_rules: str = _option("unsplit", "tuning rules: unsplit (default: MetaSchedule's CPU rules without "
                                         "splitting a reduction) or llvm (its CPU rules as they are)",
                              choices=("unsplit", "llvm"), cli=("compare",))
    workspace_shared: bool = _option(False, "kernel workspace shares the arena with the tensors: the reorder "
                                            "minimises the peak with workspace first", cli=(),
                                     python_only="set by the microcontroller export")
    scheduler_options: dict = _option(None, "further options of the scheduler (passed to MemoryAwareReorder)",
                                      cli=(), python_only="scheduler-specific keywords", factory=dict)

    def __post_init__(self):
        _validate(self)

    def replace(self, **changes) -> "PipelineOptions":
        """A copy with ``changes`` (option names, checked as at creation)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def changed(self) -> dict:
        """The options that differ from their defaults, by name."""
        default = PipelineOptions()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    def to_cli_args(self, command: str | None = None) -> list[str]:
        """The command-line flags giving these options (defaults left out; Python-only fields such as
        ``progress`` are no part of a command line). With ``command``: refuse an option that command lacks."""
        out = []
        for f in option_fields(command):
            value, default = getattr(self, f.name), f.default
            if value == default:
                continue
            if f.metadata["const"] is not None:         # an optional-value flag (--rewrite [POLICY])
                if not isinstance(value, str):
                    raise OptionError(f"{f.name}={value!r} has no command-line form (give a policy)")
                out += [_flag(f), value]
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    raise OptionError(f"{f.name}={value!r} has no command-line form (only True or False)")
                out.append(_flag(f))
            else:
                out += [_flag(f), str(value)]
        if command is not None:
            lacking = [n for n in self.changed() if n not in {f.name for f in option_fields(command)}
                       and _meta(n)["cli"]]
            if lacking:
                raise OptionError(f"the {command} command has no flag for {', '.join(lacking)}")
        return out

    @classmethod
    def from_cli(cls, namespace, **overrides) -> "PipelineOptions":
        """The options an ``argparse`` namespace holds (flags made by :func:`add_arguments`; a field the command
        lacks keeps its default), with ``overrides`` (e.g. ``progress``)."""
        ns = vars(namespace)
        values = {f.name: ns[f.name] for f in option_fields() if f.name in ns}
        return cls(**{**values, **overrides})


_dataclass_init = PipelineOptions.__init__


@functools.wraps(_dataclass_init)
def _init(self, **options):
    _check_names(options)           # an unknown keyword fails with the valid names, not a bare TypeError
    _dataclass_init(self, **options)


PipelineOptions.__init__ = _init


def _meta(name: str) -> dict:
    return {f.name: f.metadata for f in dataclasses.fields(PipelineOptions)}[name]


def option_fields(command: str | None = None) -> list:
    """The fields with a command-line flag (of ``command``, or of any command), in order."""
    return [f for f in dataclasses.fields(PipelineOptions)
            if f.metadata["cli"] and (command is None or command in f.metadata["cli"])]


def _flag(f) -> str:
    if f.metadata["flag"]:
        return f.metadata["flag"]
    dashed = f.name.replace("_", "-")
    return f"--no-{dashed}" if f.default is True else f"--{dashed}"


def add_arguments(parser, command: str) -> None:
    """Add the flags of every option ``command`` (``"compare"`` or ``"micro"``) takes to ``parser``: the one
    place the commands' pipeline flags are written. :meth:`PipelineOptions.from_cli` reads them back."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}")
    for f in option_fields(command):
        m = f.metadata
        names = [_flag(f), *m["aliases"]]
        text = f"{m['off']} (default: {m['help']})" if f.default is True and m["off"] else m["help"]
        kw = {"dest": f.name, "default": f.default, "help": text.replace("%", "%%")}
        if m["const"] is not None:
            kw.update(nargs="?", const=m["const"], default=f.default)
        elif isinstance(f.default, bool):
            kw["action"] = "store_false" if f.default else "store_true"
        elif m["type"] is not None:
            kw["type"] = m["type"]
        choices = m["choices"]() if callable(m["choices"]) else m["choices"]
        if choices is not None:
            kw["choices"] = list(choices)
        if m["metavar"] and not isinstance(f.default, bool):
            kw["metavar"] = m["metavar"]
        parser.add_argument(*names, **kw)


def resolve_options(options=None, overrides: dict | None = None) -> PipelineOptions:
    """``options`` (a :class:`PipelineOptions`, a dict of options, None, or a method name: the second positional
    argument before there were options objects) with keyword ``overrides``: what every entry point does with its
    ``options`` argument and its keywords. An unknown keyword fails by name.

    >>> resolve_options(PipelineOptions(method="rpo"), {"tradeoff": "speed"}).changed()
    {'method': 'rpo', 'tradeoff': 'speed'}
    """
    overrides = dict(overrides or {})
    if isinstance(options, str):        # the scheduler method, once the second positional argument
        overrides = {"method": options, **overrides}
        options = None
    if options is None:
        options = PipelineOptions()
    elif isinstance(options, dict):
        overrides = {**options, **overrides}
        options = PipelineOptions()
    elif not isinstance(options, PipelineOptions):
        raise OptionError(f"options must be a PipelineOptions (or a dict of options), got {type(options).__name__}")
    return options.replace(**overrides) if overrides else options


_NAMES = None


def _names() -> list[str]:
    global _NAMES
    if _NAMES is None:
        _NAMES = [f.name for f in dataclasses.fields(PipelineOptions)]
    return _NAMES


def _check_names(kwargs: dict) -> None:
    unknown = [k for k in kwargs if k not in _names()]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, _names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownOptionError(f"unknown pipeline option {k!r}{hint}; options: {', '.join(_names())} "
                                 "(a scheduler's own keywords go in scheduler_options={...})")


def _bool(name, value):
    if not isinstance(value, bool):
        raise OptionError(f"{name} must be True or False, got {value!r}")


def _bool_or_dict(name, value):
    if not isinstance(value, (bool, dict)):
        raise OptionError(f"{name} must be True, False or a dict of the pass's options, got {value!r}")


def _validate(o: PipelineOptions) -> None:
    """Check every option (one-line :class:`OptionError` naming it) and normalise the spellings that mean the
    same (``rewrite=True`` is the default policy, ``layout=None`` is ``"keep"``)."""
    def put(name, value):
        object.__setattr__(o, name, value)

    if o.method not in _methods():
        raise OptionError(f"unknown method {o.method!r}; use one of {', '.join(_methods())}")
    for name in ("time_limit", "allowance"):
        v = getattr(o, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise OptionError(f"{name} must be a number, got {v!r}")
    if o.time_limit is not None and not o.time_limit > 0:
        raise OptionError(f"time_limit must be a positive number of seconds, got {o.time_limit}")
    if not o.allowance >= 0:
        raise OptionError(f"allowance must be a non-negative fraction, got {o.allowance}")
    if o.alignment is not None and (isinstance(o.alignment, bool) or not isinstance(o.alignment, int)
                                    or o.alignment < 1 or o.alignment & (o.alignment - 1)):
        raise OptionError(f"alignment must be a power of two (bytes), got {o.alignment!r}")
    for name in ("reorder", "plan", "exact_arena", "int8", "shrink_workspace", "shrink_constants", "inplace",
                 "absorb_transposes", "workspace_shared"):
        _bool(name, getattr(o, name))
    for name in ("tile", "inline_producers", "affine_chains"):
        _bool_or_dict(name, getattr(o, name))
    if o.workspace not in WORKSPACE_MODES:
        raise OptionError(f"unknown workspace {o.workspace!r}; use lowered, tir or None")
    if o.rewrite is None:
        put("rewrite", False)
    elif o.rewrite is True:
        put("rewrite", REWRITE_POLICIES[0])
    elif isinstance(o.rewrite, str) and o.rewrite not in REWRITE_POLICIES:
        raise OptionError(f"unknown rewrite policy {o.rewrite!r}; use one of {', '.join(REWRITE_POLICIES)}")
    elif not isinstance(o.rewrite, (bool, str, dict)):
        raise OptionError(f"rewrite must be True, False, a policy or a dict of IdentityRewrite's options, "
                          f"got {o.rewrite!r}")
    if o.layout is None:
        put("layout", "keep")
    elif o.layout not in LAYOUT_CHOICES:
        raise OptionError(f"unknown layout {o.layout!r}; use one of {', '.join(LAYOUT_CHOICES)}")
    if isinstance(o.tune, bool) or not isinstance(o.tune, int) or o.tune < 0:
        raise OptionError(f"tune must be a number of trials >= 0, got {o.tune!r}")
    if o.tune_rules not in ("unsplit", "llvm"):
        raise OptionError(f"unknown tune_rules {o.tune_rules!r}; use unsplit or llvm")
    if o.tune_database is not None and not isinstance(o.tune_database, str):
        raise OptionError(f"tune_database must be a directory path, got {o.tune_database!r}")
    if o.tradeoff not in TRADEOFFS:
        raise OptionError(f"unknown tradeoff {o.tradeoff!r}; use one of {', '.join(TRADEOFFS)}")
    if o.progress is not None and not callable(o.progress):
        raise OptionError(f"progress must be a callable or None, got {o.progress!r}")
    try:
        put("extra_passes", tuple(o.extra_passes or ()))
    except TypeError:
        raise OptionError(f"extra_passes must be a sequence of passes, got {o.extra_passes!r}") from None
    if not isinstance(o.scheduler_options, dict):
        raise OptionError(f"scheduler_options must be a dict, got {o.scheduler_options!r}")
    clash = [k for k in o.scheduler_options if k in _names()]
    if clash:
        raise OptionError(f"scheduler_options: {clash[0]!r} is a pipeline option of its own; give it directly")
    put("scheduler_options", dict(o.scheduler_options))
