"""Packaging for tvm_memsched. The core needs only numpy and networkx; heavy parts are extras."""

from setuptools import find_packages, setup

# tflite: the schema package relax.frontend.tflite imports; apache-tvm-ffi: imported directly (structural_equal).
# apache-tvm-ffi 0.1.14.post1, not 0.1.15.*: with 0.1.15.post1/post2, serializing any TVM IR object to JSON
# (tvm.ir.save_json, which MetaSchedule's database, mutators and worker processes use) crashes the process
TVM = ["apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1", "tflite==2.18.0"]
ILP = ["ortools==9.15.6755"]
TFLITE = ["ai-edge-litert==2.3.0", "tflite-micro==0.dev20261023182759"]
PLOT = ["matplotlib>=3.7"]
TORCH = ["torch==2.13.0"]
ONNX = ["onnx==1.23.2", "onnxruntime==1.32.0"]   # .onnx models (relax.frontend.onnx); onnxruntime: the reference
# MetaSchedule tuning (--tune): its cost model (XGBoost), CPU count and the worker processes' pickling
TUNE = ["xgboost-cpu==3.2.0", "psutil==7.2.2", "cloudpickle==3.1.3"]
ALL = TVM + ILP + TFLITE + PLOT + ONNX + TUNE
# pymicro-wakeword: real streaming .tflite models (microWakeWord, Apache-2.0) for tests/test_wakeword.py
TEST = ALL + TORCH + ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "pymicro-wakeword==2.5.0"]

setup(
    name="tvm_memsched",
    version="0.1.0",
    description="Memory-aware operator scheduling and arena planning for TVM Relax, "
                "microcontrollers, TFLite Micro and Coral Edge TPUs",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tvm_memsched", "tvm_memsched.*"]),
    package_data={"tvm_memsched": ["zoo/data/*.json", "schedulers/data/*.npz", "tflite/data/*.npz",
                                    "micro/runtime/*", "micro/runtime/*/*"]},
    install_requires=["numpy>=1.24", "networkx>=3.0"],
    extras_require={"tvm": TVM, "ilp": ILP, "tflite": TFLITE, "plot": PLOT, "torch": TORCH, "onnx": ONNX, "tune": TUNE,
                    "all": ALL, "test": TEST},
    entry_points={"console_scripts": ["tvm-memsched=tvm_memsched.app.cli:main"]},
)
