"""The application layer: the ``tvm-memsched`` command and what only it needs.

It sits on top of the library packages (``core <- schedulers <- relax,
tflite <- micro <- zoo <- app``); nothing in them imports it.

* :mod:`.cli` - the entry point (:func:`~.cli.main`) and the graph, ``compare``, ``bench`` and ``demo`` commands;
* :mod:`.micro_cli`, :mod:`.tflite_cli` - the ``micro``, ``tflite`` and ``coral`` commands;
* :mod:`.models` - model specs (``zoo:NAME[:int8|:float16]``, ``.tflite``, graph JSON) resolved in one place;
* :mod:`.output` - byte sizes, tables, JSON and binary files;
* :mod:`.progress` - progress bars and rate-limited progress messages;
* :mod:`.report`, :mod:`.plots` - the benchmark report and its figures.
"""
