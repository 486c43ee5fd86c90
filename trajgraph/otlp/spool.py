"""The receiver's spool: per tenant, one append-only OTLP/JSON file of the spans accepted.

One line per accepted request (only its spans not already spooled), written whole and
fsynced before the request is answered: an exporter told 200 never loses a span, and a
span sent twice (an exporter retrying after a timeout) is spooled once. The tenant's stream
(trajgraph stream, started by trajgraph/otlp/streams.py) tails the file, which the file
adapter reads like any OTLP file export, so spans of one trace or conversation that came in
several requests, in any order, are assembled into one trajectory as a file ingest would.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

SPANS_FILE = "spans.jsonl"


def tenant_dir(root: Path, tenant: str) -> Path:
    """The tenant's folder: named by a hash, so no tenant name can reach outside ``root``."""
    return root / hashlib.sha256(tenant.encode()).hexdigest()[:32]


class TenantSpool:
    """One tenant's spans file and the (trace, span) ids already in it."""

    def __init__(self, folder: Path, tenant: str) -> None:
        self.folder = folder
        self.path = folder / SPANS_FILE
        self.tenant = tenant
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] | None = None

    def _load(self) -> set[tuple[str, str]]:
        """The ids already spooled (read once); a torn last line (a crash mid-write, never
        answered 200) is cut off so the next line starts on its own."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "tenant").write_text(self.tenant, encoding="utf-8")
        seen: set[tuple[str, str]] = set()
        if not self.path.exists():
            return seen
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            with self.path.open("r+b") as f:
                f.truncate(end)
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            export = json.loads(line)
            for rs in export.get("resourceSpans") or []:
                for ss in rs.get("scopeSpans") or []:
                    for s in ss.get("spans") or []:
                        seen.add((s["traceId"], s["spanId"]))
        return seen

    def append(self, export: dict[str, Any], span_ids: list[tuple[str, str]]) -> int:
        """Spool the spans of ``export`` not spooled before; how many were new."""
        from trajgraph.otlp.decode import drop_spans

        with self._lock:
            if self._seen is None:
                self._seen = self._load()
            new = {k for k in span_ids if k not in self._seen}
            if not new:
                return 0
            if len(new) < len(set(span_ids)):
                export = drop_spans(export, new)
            # ASCII: a lone surrogate a JSON body smuggled in stays an escape, not bad UTF-8.
            line = json.dumps(export, separators=(",", ":")) + "\n"
            with self.path.open("ab") as f:
                f.write(line.encode("ascii"))
                f.flush()
                os.fsync(f.fileno())
            self._seen |= new
            return len(new)


class Spool:
    """Every tenant's spool under one folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tenants: dict[str, TenantSpool] = {}
        self._lock = threading.Lock()

    def of(self, tenant: str) -> TenantSpool:
        with self._lock:
            if tenant not in self._tenants:
                self._tenants[tenant] = TenantSpool(tenant_dir(self.root, tenant), tenant)
            return self._tenants[tenant]

    def tenants_on_disk(self) -> list[str]:
        """Tenants that have spooled spans (their streams restart with the server)."""
        if not self.root.is_dir():
            return []
        names = []
        for folder in sorted(self.root.iterdir()):
            name_file = folder / "tenant"
            if (folder / SPANS_FILE).is_file() and name_file.is_file():
                names.append(name_file.read_text(encoding="utf-8"))
        return names
