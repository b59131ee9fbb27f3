"""The producer's own table in the barrier tests: one order row per local transaction."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table

metadata = MetaData()
orders = Table("orders", metadata,
               Column("id", Integer, primary_key=True, autoincrement=True),
               Column("transaction_id", String(128), nullable=False, unique=True))
