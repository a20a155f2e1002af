"""Where the master key comes from: MEMSTREAM_MASTER_KEY (base64 of 32 bytes), else the file
MEMSTREAM_MASTER_KEY_FILE names, else ``master.key`` in the data directory, made on first use.

The last gives erasure (destroyed data keys are gone) but not confidentiality at rest against
someone holding the whole data directory, who holds the master key too (docs/security.md).
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import threading
from collections.abc import Mapping
from pathlib import Path

from memstream.streams.keys.port import DEK_BYTES

ENV_KEY = "MEMSTREAM_MASTER_KEY"
ENV_FILE = "MEMSTREAM_MASTER_KEY_FILE"
LOCAL_NAME = "master.key"


class MasterKeyError(Exception):
    """The master key is malformed, unreadable, or not the one the key store was made with."""


def parse_master_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MasterKeyError(f"{where} is not base64: {exc}") from exc
    if len(key) != DEK_BYTES:
        raise MasterKeyError(f"{where} must hold {DEK_BYTES} bytes (base64), it holds {len(key)}")
    return key


def new_master_key_text() -> str:
    return base64.b64encode(secrets.token_bytes(DEK_BYTES)).decode("ascii")


def resolve_master_key(data_dir: Path, env: Mapping[str, str] | None = None) -> tuple[bytes, str]:
    """The master key and where it came from (for the docs' threat model and the banner)."""
    env = os.environ if env is None else env
    if env.get(ENV_KEY):
        return parse_master_key(env[ENV_KEY], ENV_KEY), ENV_KEY
    if env.get(ENV_FILE):
        path = Path(env[ENV_FILE])
        try:
            return parse_master_key(path.read_text(), str(path)), str(path)
        except OSError as exc:
            raise MasterKeyError(f"cannot read {ENV_FILE}={path}: {exc}") from exc
    path = data_dir / LOCAL_NAME
    if not path.exists():
        write_key_file(path, new_master_key_text())
    try:
        return parse_master_key(path.read_text(), str(path)), str(path)
    except OSError as exc:
        raise MasterKeyError(f"cannot read {path}: {exc}") from exc


def write_key_file(path: Path, text: str) -> None:
    """Write a key file readable by its owner only, atomically (a racing writer keeps the
    first). The temporary name is the thread's as well as the process's: two first starts in
    one process (a server and an in-process rebuild) shared it, the second open truncated the
    first's file, and the second link found it gone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (text + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process made it first: theirs wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
