"""PATHS given as fsspec URLs (``s3://bucket/run/``, ``gs://…``, ``file://…``, ``memory://…``).

Plain local paths never come here: they keep the ``safe_io`` code path.  A URL is listed once
(recursively) by the caller's process and each file becomes a :class:`RemoteFile`, a small
picklable record (URL, size, modification time) that a worker — a local process or a Dask worker
on another machine — reopens with its own fsspec, credentials and endpoint settings (for S3:
``AWS_*`` variables, ``AWS_ENDPOINT_URL`` for an S3-compatible store).  Only reads: nothing is
ever written to the store.

Errors are one line: a missing backend names the package to install (exit 2), a store that
cannot be reached or refuses the credentials is :class:`~ddpdoctor.errors.UnreachableError`
(exit 4).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import datetime

from .errors import InputError, UnreachableError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
INSTALL_HINTS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "adl": "adlfs",
    "hf": "huggingface_hub",
    "sftp": "paramiko",
    "ssh": "paramiko",
    "http": "aiohttp",
    "https": "aiohttp",
    "hdfs": "pyarrow",
}


def is_url(path) -> bool:
    """``scheme://…`` with a scheme of two or more letters (so ``C:\\…`` stays a path)."""
    return isinstance(path, str) and _URL.match(path) is not None


@dataclass(frozen=True)
class RemoteFile:
    """One file of a URL input, as the listing saw it."""

    url: str
    size: int
    mtime_ns: int
    given: bool = False  # the user named this file itself (not a folder holding it)

    @property
    def name(self) -> str:
        return posixpath.basename(self.url.rstrip("/"))

    @property
    def folder_name(self) -> str:
        return posixpath.basename(posixpath.dirname(self.url.rstrip("/")))

    def __str__(self) -> str:
        return self.url


def filesystem(url: str):
    """(fsspec filesystem, path inside it) for ``url``; one line naming the package when the backend
    is missing."""
    scheme = _URL.match(url).group(1).lower()
    try:
        import fsspec
    except ImportError:
        raise InputError(
            f"{url}: URL inputs need fsspec, which is not installed: pip install 'ddpdoctor[remote]'"
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        pkg = INSTALL_HINTS.get(scheme) or getattr(exc, "name", None) or "its fsspec backend"
        raise InputError(
            f"{url}: reading {scheme}:// needs {pkg}, which is not installed: pip install {pkg}"
            + (" (or 'ddpdoctor[s3]')" if pkg == "s3fs" else "")
        ) from None
    except ValueError as exc:
        raise InputError(f"{url}: unknown URL scheme {scheme}:// ({exc})") from None


def _call(url: str, fn, *args, **kwargs):
    """A call into the store, its failures as one-line errors."""
    try:
        return fn(*args, **kwargs)
    except FileNotFoundError:
        raise InputError(f"{url}: no such file or directory") from None
    except PermissionError as exc:
        raise UnreachableError(f"{url}: access denied ({_short(exc)})") from None
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - backends raise their own types (botocore, aiohttp, …)
        raise UnreachableError(f"{url}: cannot read from the store ({type(exc).__name__}: {_short(exc)})") from None


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def _mtime_ns(info: dict) -> int:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created", "modified"):
        v = info.get(key)
        if v is None:
            continue
        if isinstance(v, datetime):
            return int(v.timestamp() * 1e9)
        if isinstance(v, (int, float)):
            return int(v * 1e9)
        if isinstance(v, str):
            try:
                return int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1e9)
            except ValueError:
                continue
    return 0


def list_files(url: str) -> list[RemoteFile]:
    """Every file under ``url`` (recursively, sorted), or the file ``url`` names."""
    fs, root = filesystem(url)
    info = _call(url, fs.info, root)
    if info.get("type") != "directory":
        return [
            RemoteFile(
                fs.unstrip_protocol(info.get("name", root)), int(info.get("size") or 0), _mtime_ns(info), given=True
            )
        ]
    entries = _call(url, fs.find, root, detail=True, withdirs=False)
    return [
        RemoteFile(fs.unstrip_protocol(name), int(e.get("size") or 0), _mtime_ns(e))
        for name, e in sorted(entries.items())
        if e.get("type") != "directory"
    ]


def read_range(f: RemoteFile, start: int, end: int) -> bytes:
    """Bytes ``start:end`` of the file (clipped to its size)."""
    fs, path = filesystem(f.url)
    end = min(end, f.size)
    if start >= end:
        return b""
    return _call(f.url, fs.cat_file, path, start=start, end=end)


def read_capped(f: RemoteFile, cap: int, what: str = "file", env: str = "DDPDOCTOR_MAX_TRACE_BYTES") -> bytes:
    """The whole file, or the same one-line error as ``safe_io.read_capped`` when it is larger than ``cap``."""
    if f.size > cap:
        raise InputError(f"{f}: {what} larger than the limit of {cap} bytes (raise it with {env})")
    fs, path = filesystem(f.url)
    data = _call(f.url, fs.cat_file, path)
    if len(data) > cap:
        raise InputError(f"{f}: {what} larger than the limit of {cap} bytes (raise it with {env})")
    return data
