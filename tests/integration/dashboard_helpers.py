"""What the dashboard tests share: the admin token they run with, and a form's CSRF token."""

from __future__ import annotations

import re
from typing import Any

ADMIN_TOKEN = "admin-token-for-tests-0123456789"


def csrf_of(page: Any) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True))
    assert found, page.get_data(as_text=True)
    return found[1]
