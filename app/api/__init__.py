"""HTTP API: one route table (``routes``), served by the ASGI front (``asgi``) and Flask."""
