"""``python -m gateway`` is the same as ``llm-gateway``."""

from gateway.cli import main

raise SystemExit(main())
