"""The memory passes on Relax modules, one module per pass (the public names are in :mod:`tvm_memsched.transform`).

* :mod:`.reorder` (``MemoryAwareReorder``), :mod:`.arena` (``ArenaPlanMemory``'s planner), :mod:`.aliasing`
  (the aliased kernels lose ``noalias``, on LLVM built apart);
* :mod:`.shrink_workspace`, :mod:`.balance_kernels`, :mod:`.inline_producers`, :mod:`.vectorize_kernels` -
  kernel workspace and speed;
* :mod:`.shrink_constants`, :mod:`.layout`, :mod:`.tiling`, :mod:`.float_kernels`;
* :mod:`.affine_chains`, :mod:`.absorb_transposes` - what exporters write differently, written one way;
* :mod:`.transform` - the ``tvm.transform`` pass classes.

Passes import no importer (:mod:`tvm_memsched.relax.frontends`); tests/test_layering.py checks it.
"""
