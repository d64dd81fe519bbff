"""Weights files of the learned models: the learned scheduler's and the Coral segmenter's.

A weights file is a compressed ``.npz`` with every parameter as float32 (key
``p:<name>``) and the metadata as JSON (key ``meta_json``): the format name,
the feature version the weights were trained on, the model's config and
feature lists, the parameter count and a SHA-256 over the parameters
(:func:`params_digest`). :func:`write_weights_npz` writes one;
:func:`read_weights_npz` reads one back and checks it, with a one-line
:class:`~tvm_memsched.core.errors.MemschedError` for a missing, foreign,
outdated or corrupted file; :func:`load_weights` builds (and caches) the
model object from it.

Example
-------
>>> import os, tempfile
>>> import numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
>>> meta = write_weights_npz(path, {"W": np.ones((2, 3))}, {"format": "demo/1", "feature_version": 1})
>>> meta["num_params"]
6
>>> params, meta = read_weights_npz(path, format="demo/1", feature_version=1, what="demo model")
>>> params["W"].dtype, meta["params_sha256"] == params_digest(params)
(dtype('float32'), True)
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ..core.errors import MemschedError

__all__ = ["params_digest", "write_weights_npz", "read_weights_npz", "load_weights"]


def params_digest(params: dict) -> str:
    """SHA-256 over the parameter names, shapes and float32 values (sorted by name)."""
    h = hashlib.sha256()
    for name in sorted(params):
        a = np.ascontiguousarray(np.asarray(params[name], dtype=np.float32))
        h.update(name.encode())
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_weights_npz(path: str, params: dict, meta: dict, extra_meta: dict | None = None) -> dict:
    """Write ``params`` as float32 and ``meta`` updated with ``extra_meta`` (plus the parameter hash and count)
    as a compressed npz.

    Shared by every learned model of the package; returns the metadata written.
    """
    params32 = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    meta = {**meta, **(extra_meta or {}), "params_sha256": params_digest(params32),
            "num_params": int(sum(a.size for a in params32.values()))}
    arrays = {f"p:{k}": v for k, v in params32.items()}
    arrays["meta_json"] = np.array(json.dumps(meta, sort_keys=True))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez_compressed(path, **arrays)
    return meta


def read_weights_npz(path: str, *, format: str, feature_version: int, what: str, train: str = "",
                     param_shapes=None) -> tuple[dict, dict]:
    """``(params, meta)`` of the weights file ``path``, checked.

    Parameters
    ----------
    path : str
        The ``.npz`` file.
    format : str
        The ``meta["format"]`` the file must carry (e.g. ``"tvm_memsched.learned/1"``).
    feature_version : int
        The feature version the reading code computes; the file must have been trained on it.
    what : str
        The model's name in error messages (``"learned scheduler"``).
    train : str
        How to make the file, appended to the "not found" error.
    param_shapes : callable, optional
        ``param_shapes(meta["config"])`` gives the expected ``{name: shape}``.

    Raises
    ------
    MemschedError
        When the file is missing or unreadable, of another format or feature
        version, corrupted (hash mismatch) or of the wrong shapes.
    """
    if not os.path.exists(path):
        raise MemschedError(f"{what} weights not found at {path}" + (f"; {train}" if train else ""))
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta_json"]))
            params = {k[2:]: z[k] for k in z.files if k.startswith("p:")}
    except (OSError, ValueError, KeyError) as e:
        raise MemschedError(f"{path}: not a {what} weights file ({e})") from None
    if meta.get("format") != format:
        raise MemschedError(f"{path}: not a {what} weights file (format {meta.get('format')!r})")
    if meta.get("feature_version") != feature_version:
        raise MemschedError(f"{path}: weights were trained with feature version {meta.get('feature_version')}, "
                            f"this code computes version {feature_version}; retrain")
    if params_digest(params) != meta.get("params_sha256"):
        raise MemschedError(f"{path}: parameter hash mismatch (file corrupted?)")
    if param_shapes is not None:
        shapes = param_shapes(meta["config"])
        if {k: tuple(v.shape) for k, v in params.items()} != {k: tuple(s) for k, s in shapes.items()}:
            raise MemschedError(f"{path}: parameter shapes do not match the config {meta['config']}")
    return params, meta


def load_weights(path: str, model_class, cache: dict, **checks):
    """``model_class(params, config)`` of the weights file ``path`` with its ``meta`` attached, cached by path.

    ``checks`` are :func:`read_weights_npz`'s keyword arguments (format, feature version, ...).
    """
    path = os.path.abspath(path)
    if path not in cache:
        params, meta = read_weights_npz(path, **checks)
        model = model_class(params, meta["config"])
        model.meta = meta
        cache[path] = model
    return cache[path]
