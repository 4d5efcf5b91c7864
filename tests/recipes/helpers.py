"""Small recipe documents built in the tests (so each test states what it checks)."""

from __future__ import annotations

import textwrap

BASE_HEADER = """\
name: Demo
engine: vllm
model_type: chat
api_model_name: demo-model
port: 8000
"""


def doc(header: str = BASE_HEADER, script: str = "#!/bin/bash\necho serve\n") -> str:
    return f"---\n{textwrap.dedent(header)}---\n{textwrap.dedent(script)}"


def with_header(extra: str, script: str = "#!/bin/bash\necho serve\n") -> str:
    return doc(BASE_HEADER + textwrap.dedent(extra), script)
