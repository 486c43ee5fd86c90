"""Deterministic node ids: the same input always yields the same uid, so MERGE is idempotent."""

from __future__ import annotations

import hashlib

_SEP = "\x1f"  # unit separator: cannot be confused with characters inside ids


def uid(kind: str, *parts: object) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(kind.encode())
    for p in parts:
        h.update(_SEP.encode())
        h.update(str(p).encode("utf-8", "surrogatepass"))
    return f"{kind[:2]}_{h.hexdigest()}"


def trajectory_uid(tenant: str, trajectory_id: str) -> str:
    return uid("trajectory", tenant, trajectory_id)


def turn_uid(tenant: str, trajectory_id: str, idx: int) -> str:
    return uid("turn", tenant, trajectory_id, idx)


def state_uid(
    tenant: str, trajectory_id: str, turn: int, subject: str, attribute: str, value: str
) -> str:
    return uid("state", tenant, trajectory_id, turn, subject, attribute, value)


def object_uid(tenant: str, trajectory_id: str, name: str) -> str:
    return uid("object", tenant, trajectory_id, name)


def identifier_uid(tenant: str, value: str) -> str:
    return uid("identifier", tenant, value)


def signature_uid(tenant: str, version: int, text: str) -> str:
    """One failure signature of a tenant (extractors/signatures.py), per normalisation
    version: signatures of two versions never merge."""
    return uid("signature", tenant, version, text)


def resolution_uid(tenant: str, trajectory_id: str, signature: str, first_turn: int) -> str:
    return uid("resolution", tenant, trajectory_id, signature, first_turn)
