"""PipelineOptions (tvm_memsched.relax.options): one options object for pipeline, build, compare, the micro export
and the compare / micro commands. The object round-trips the generated flags, keyword calls build the same
pipeline as the object, bad options fail by name, and every option with a flag is on its commands."""

from __future__ import annotations

import dataclasses

import pytest

from tvm_memsched.app.cli import build_parser, main
from tvm_memsched.relax.options import (COMMANDS, LAYOUT_CHOICES, TRADEOFFS, OptionError, PipelineOptions,
                                        UnknownOptionError, add_arguments, option_fields)
from tvm_memsched.relax.pipeline import MemschedPipeline, VM_ALIGNMENT, pipeline

LLVM = {"kind": "llvm"}

#: pipeline()'s keyword defaults before the options object (the signature users called)
OLD_DEFAULTS = dict(method="auto", time_limit=None, alignment=64, reorder=True, plan=True, workspace="lowered",
                    exact_arena=True, extra_passes=(), progress=None, rewrite=False, int8=True,
                    shrink_workspace=True, shrink_constants=True, inplace=True, layout="auto", tile=False,
                    inline_producers=True, tradeoff="memory", allowance=0.10, affine_chains=True,
                    absorb_transposes=True)

#: the fields without a flag, on purpose (a callable, pass objects, pass option dicts, internals)
PYTHON_ONLY = {"reorder", "plan", "workspace", "extra_passes", "progress", "tile", "workspace_shared",
               "scheduler_options"}


def _other_value(f):
    """A valid value of field ``f`` other than its default, as its flag would give it."""
    m = f.metadata
    if isinstance(f.default, bool) and m["const"] is None:
        return not f.default
    choices = m["choices"]() if callable(m["choices"]) else m["choices"]
    if choices:
        return [c for c in choices if c != f.default][-1]
    return {float: 0.25, int: 32}.get(m["type"], "some-value")     # a string option (a path, a name)


def _parse(command, args):
    return build_parser().parse_args([command, "zoo:none", *args] + (["-b", "mps2-an386"] if command == "micro" else []))


def _config(p: MemschedPipeline) -> dict:
    """What a pipeline does: its passes and the settings of ours."""
    r, a = p.reorder, p.arena
    return {"passes": p.pass_names(),
            "reorder": r and (r.method, r.time_limit, r.workspace, r.workspace_shared, r.options),
            "arena": a and (a.alignment, a.exact, a.inplace),
            "shrink": p.shrink and p.shrink.mode, "layout": p.layout and p.layout.layout}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_round_trips_through_the_command_line(command):
    fields = option_fields(command)
    assert fields
    for f in fields:                                    # one option at a time, then all of them at once
        opts = PipelineOptions(**{f.name: _other_value(f)})
        args = opts.to_cli_args(command)
        assert args and args[0].startswith("--")
        assert PipelineOptions.from_cli(_parse(command, args)) == opts, f.name
    every = PipelineOptions(**{f.name: _other_value(f) for f in fields})
    assert PipelineOptions.from_cli(_parse(command, every.to_cli_args(command))) == every
    # no flags: the defaults, which build the pipeline the old keyword defaults built
    assert PipelineOptions.from_cli(_parse(command, [])) == PipelineOptions()
    assert PipelineOptions().to_cli_args() == []


def test_defaults_are_the_old_keyword_defaults():
    old = PipelineOptions(**OLD_DEFAULTS)
    new = PipelineOptions()
    assert old.changed() == {"alignment": 64}           # alignment None: the target's (64 on the VM, 16 on micro)
    assert _config(pipeline(LLVM)) == _config(pipeline(LLVM, old)) == _config(pipeline(LLVM, new))
    assert pipeline(LLVM).arena.alignment == VM_ALIGNMENT == 64


@pytest.mark.parametrize("kw", [
    {"method": "greedy", "tradeoff": "speed"},
    {"method": "dp", "time_limit": 2.0, "alignment": 16, "exact_arena": False},
    {"tradeoff": "balanced", "allowance": 0.2, "inplace": False, "layout": "keep"},
    {"int8": False, "shrink_workspace": False, "shrink_constants": False, "affine_chains": False,
     "absorb_transposes": False, "inline_producers": False, "reorder": False, "plan": False},
    {"rewrite": True, "tile": True, "inline_producers": {"bands": False}, "layout": "NCHW"},
    {"method": "beam", "scheduler_options": {"width": 4}, "workspace": "tir", "workspace_shared": True},
])
def test_keyword_calls_build_the_same_pipeline_as_the_object(kw):
    by_keywords = pipeline(LLVM, **kw)
    by_object = pipeline(LLVM, PipelineOptions(**kw))
    assert _config(by_keywords) == _config(by_object)
    assert by_keywords.options == by_object.options == PipelineOptions(**kw)
    # keywords on top of an object change a copy; the object stays as it was
    opts = PipelineOptions(**kw)
    assert pipeline(LLVM, opts, method="rpo").options == opts.replace(method="rpo") != opts


def test_the_old_positional_method_and_the_scheduler_options_still_reach_the_scheduler():
    assert pipeline(LLVM, "greedy").options.method == "greedy"
    assert MemschedPipeline(LLVM, "dp", time_limit=1.0).reorder.time_limit == 1.0
    p = pipeline(LLVM, method="beam", scheduler_options={"width": 4})
    assert p.reorder.options == {"inplace": True, "width": 4}          # what reaches beam's schedule(width=4)
    assert pipeline(LLVM, rewrite=True).rewrite.policy == "if-better"
    assert pipeline(LLVM, rewrite="always").rewrite.policy == "always"


def test_unknown_keywords_fail_by_name_with_the_valid_names():
    from tvm_memsched import micro
    from tvm_memsched.relax.compare import compare
    from tvm_memsched.relax.testing import branchy_module

    for call in (lambda: pipeline(LLVM, tradeof="speed"), lambda: PipelineOptions(tradeof="speed"),
                 lambda: PipelineOptions().replace(tradeof="speed"),
                 lambda: compare(branchy_module(branches=2), tradeof="speed"),
                 lambda: micro.export(branchy_module(branches=2), "mps2-an386", "/nonexistent", tradeof="speed")):
        with pytest.raises(UnknownOptionError, match=r"'tradeof' \(did you mean 'tradeoff'\?\).*time_limit"):
            call()
    with pytest.raises(TypeError, match="unknown pipeline option 'width'"):   # a TypeError too, as Python's own
        pipeline(LLVM, method="beam", width=4)


@pytest.mark.parametrize("kw, name", [
    ({"tradeoff": "fast"}, "tradeoff"), ({"time_limit": -1}, "time_limit"), ({"time_limit": "5"}, "time_limit"),
    ({"layout": "NWHC"}, "layout"), ({"alignment": 24}, "alignment"), ({"alignment": 0}, "alignment"),
    ({"method": "quick"}, "method"), ({"int8": "yes"}, "int8"), ({"rewrite": "sometimes"}, "rewrite"),
    ({"allowance": -0.1}, "allowance"), ({"workspace": "all"}, "workspace"), ({"tile": 2}, "tile"),
    ({"progress": 3}, "progress"), ({"scheduler_options": {"method": "dp"}}, "method"),
    ({"scheduler_options": [("width", 4)]}, "scheduler_options"),
])
def test_invalid_values_fail_naming_the_option(kw, name):
    with pytest.raises(OptionError, match=name):
        PipelineOptions(**kw)
    with pytest.raises(ValueError, match=name):      # what pipeline(tradeoff="fast") raised before
        pipeline(LLVM, **kw)


def test_entry_points_refuse_options_they_do_not_apply():
    from tvm_memsched import micro
    from tvm_memsched.core.errors import UnsupportedError
    from tvm_memsched.relax.compare import compare
    from tvm_memsched.relax.testing import branchy_module

    with pytest.raises(OptionError, match="reorder=False"):
        compare(branchy_module(branches=2), reorder=False)
    with pytest.raises(UnsupportedError, match="tradeoff='speed'.*not supported"):
        micro.export(branchy_module(branches=2), "mps2-an386", "/nonexistent", tradeoff="speed")
    with pytest.raises(OptionError, match="micro command has no flag for tradeoff"):
        PipelineOptions(tradeoff="speed").to_cli_args("micro")
    with pytest.raises(OptionError, match="inline_producers"):
        PipelineOptions(inline_producers={"bands": False}).to_cli_args()


@pytest.mark.parametrize("command", COMMANDS)
def test_the_commands_expose_every_option_with_a_flag(command):
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p, command)
    dests = {a.dest for a in p._actions}
    cli = {f.name for f in option_fields(command)}
    assert cli <= dests
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    assert cli <= {a.dest for a in sub._actions}         # the real command has them
    every = {f.name for f in dataclasses.fields(PipelineOptions)}
    assert {f.name for f in option_fields()} == every - PYTHON_ONLY
    for f in dataclasses.fields(PipelineOptions):
        assert f.metadata["help"], f.name
        assert bool(f.metadata["cli"]) != bool(f.metadata["python_only"]), f.name


def test_old_flag_spellings_still_parse():
    assert PipelineOptions.from_cli(_parse("micro", ["--greedy-arena"])).exact_arena is False
    for command in COMMANDS:
        got = PipelineOptions.from_cli(_parse(command, ["--no-inplace", "--no-inline-producers", "--layout", "keep",
                                                        "--rewrite", "--method", "rpo", "--time-limit", "3"]))
        assert got == PipelineOptions(inplace=False, inline_producers=False, layout="keep", rewrite="if-better",
                                      method="rpo", time_limit=3.0)


def test_a_bad_flag_value_is_one_line_before_the_model_is_read(capsys):
    assert main(["compare", "no-such-model.tflite", "--alignment", "24"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "tvm-memsched: error: alignment must be a power of two (bytes), got 24"
    assert main(["micro", "no-such-model.tflite", "-b", "mps2-an386", "-o", "/nonexistent", "--alignment", "0"]) == 2
    assert capsys.readouterr().err.strip() == "tvm-memsched: error: alignment must be a power of two (bytes), got 0"
    with pytest.raises(SystemExit):                   # --tradeoff and --allowance are compare's only
        main(["micro", "no-such-model.tflite", "-b", "mps2-an386", "-o", "/nonexistent", "--allowance", "1"])
    assert "unrecognized arguments: --allowance" in capsys.readouterr().err


def test_value_sets_agree_with_the_passes():
    from tvm_memsched.relax.passes.layout import LAYOUTS
    from tvm_memsched.relax.passes.shrink_workspace import MODES

    assert TRADEOFFS == MODES
    assert set(LAYOUT_CHOICES) == {"auto", "keep", *LAYOUTS}
