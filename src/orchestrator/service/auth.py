"""API key use cases: authenticate a bearer key, create, list and revoke keys.

The tenant always comes from the key's row, never from the request. A key is looked up by
its id (parsed from the key, checksum first, so garbage never reaches the database), then
its hash is compared in constant time. Unknown, malformed and revoked keys are
indistinguishable to the caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from orchestrator.db.engine import read_only
from orchestrator.db.queries import api_keys as key_queries
from orchestrator.db.queries import workspaces as workspace_queries
from orchestrator.domain.errors import NotFound
from orchestrator.security import api_keys as keyfmt
from orchestrator.security.callback_secrets import derive_callback_secret, new_nonce

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    """Who is calling: one workspace, or an admin (``workspace_id`` None)."""

    key_id: str
    workspace_id: str | None

    @property
    def admin(self) -> bool:
        return self.workspace_id is None

    def may_see(self, workspace_id: str) -> bool:
        return self.admin or self.workspace_id == workspace_id


@dataclass(frozen=True)
class CreatedKey:
    record: key_queries.ApiKeyRecord
    plaintext: str
    #: The workspace's callback secret, only when this call created the workspace.
    callback_secret: str | None = None


def authenticate(engine: Engine, presented: str) -> Principal | None:
    """The principal of a presented key, or None if it is not a valid, active key."""
    key_id = keyfmt.parse_key_id(presented)
    if key_id is None:
        return None
    # Read without the write lock; write only when last-used needs refreshing (rarely).
    with read_only(engine).connect() as conn:
        record = key_queries.get_key(conn, key_id)
    matches = keyfmt.key_matches(record.key_hash if record else None, presented)
    if record is None or not matches or not record.active:
        return None
    if key_queries.needs_touch(record):
        with engine.begin() as conn:
            key_queries.touch_key(conn, record)
    return Principal(key_id=record.id, workspace_id=record.workspace_id)


def create_key(
    conn: Connection, *, workspace_id: str | None, name: str, callback_secret_key: str
) -> CreatedKey:
    """A new key (admin when ``workspace_id`` is None); creates the workspace if needed."""
    new = keyfmt.generate_api_key()
    key_queries.insert_key(conn, new.key_id, new.key_hash, workspace_id=workspace_id, name=name)
    secret = None
    if workspace_id is not None:
        workspace, created = workspace_queries.ensure_workspace(conn, workspace_id, new_nonce)
        if created:
            secret = derive_callback_secret(
                callback_secret_key, workspace_id, workspace.secret_nonce
            )
    record = key_queries.get_key(conn, new.key_id)
    assert record is not None
    log.info("API key %s created (%s)", new.key_id, workspace_id or "admin")
    return CreatedKey(record=record, plaintext=new.plaintext, callback_secret=secret)


def revoke_key(conn: Connection, key_id: str) -> key_queries.ApiKeyRecord:
    """Revoke a key (idempotent); the revoked record, or :class:`NotFound`."""
    if not key_queries.revoke_key(conn, key_id):
        raise NotFound(f"API key {key_id} does not exist", field="keyId")
    record = key_queries.get_key(conn, key_id)
    assert record is not None
    log.info("API key %s revoked", key_id)
    return record


def register_bootstrap_key(conn: Connection, plaintext: str) -> bool:
    """Register the configured bootstrap admin key unless its id exists. True if added.

    Raises:
        ValueError: the configured value is not a well-formed key.
    """
    key_id = keyfmt.parse_key_id(plaintext)
    if key_id is None:
        raise ValueError("ORCHESTRATOR_BOOTSTRAP_ADMIN_KEY is not a well-formed ork_ key")
    added = key_queries.insert_key(
        conn,
        key_id,
        keyfmt.hash_api_key(plaintext),
        workspace_id=None,
        name="bootstrap",
        if_absent=True,
    )
    if added:
        log.info("bootstrap admin key %s registered", key_id)
    return added
