"""A persistent request cache, so that a re-run after a crash skips every finished call.

Keys hash the model fingerprint, the operation, the request (without its caller-side id) and the
decoding parameters; values are the result records as JSON. SQLite in WAL mode lets several
processes share one cache file, and each insert commits at once, so a killed job loses at most
the call it was making.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path


def request_key(fingerprint: str, operation: str, request: dict, params: dict | list) -> str:
    payload = json.dumps(
        {"model": fingerprint, "op": operation, "request": request, "params": params},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class RequestCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        found: dict[str, dict] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # SQLite caps the number of bound parameters
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(f"SELECT key, value FROM results WHERE key IN ({marks})", chunk)
                found.update((k, json.loads(v)) for k, v in rows)
        return found

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO results (key, value) VALUES (?, ?)",
                (key, json.dumps(value, ensure_ascii=False)),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
