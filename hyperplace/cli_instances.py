"""``hyperplace instances ...`` and ``hyperplace validate`` (being written)."""

import typer


def register(app: typer.Typer) -> None:
    pass
