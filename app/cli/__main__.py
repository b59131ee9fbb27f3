"""``python -m app.cli``: the ``txmsg`` command without its console script."""

from app.cli import main

main()
