"""``hyperplace solve`` and ``hyperplace check`` (being written)."""

import typer


def register(app: typer.Typer) -> None:
    pass
