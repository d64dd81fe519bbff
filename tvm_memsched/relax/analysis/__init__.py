"""What the passes measure on TIR kernels and Relax modules: in-place safety of a kernel's output over its input
(:mod:`.inplace`, from access bounds :mod:`.access_bounds`, with the enumerating tracer :mod:`.access_trace` as
its test oracle), kernel workspace (:mod:`.workspace`), memory estimates of a module (:mod:`.estimate`), time
per pass (:mod:`.profiling`) and a kernel's run time on this machine (:mod:`.kernel_timing`)."""
