"""Importers: model files to Relax modules with static shapes.

* :mod:`.frontend` - one entry for every kind of file (``.tflite``, ``.onnx``, ``.pt2``);
* :mod:`.tflite_converter`, :mod:`.tflite_state` - TFLite (int8 data movement, stateful models);
* :mod:`.onnx_frontend`, :mod:`.onnx_fold`, :mod:`.onnx_data` - ONNX (shape arithmetic folded, external data);
* :mod:`.torch_frontend`, :mod:`.pt2_archive` - PyTorch ``.pt2`` archives, read without running their code;
* :mod:`.input_shapes`, :mod:`.names`, :mod:`.native_log` - static input shapes, readable names, TVM's log.

Importers use no memory pass (:mod:`tvm_memsched.relax.passes`); tests/test_layering.py checks it.
"""
