"""The ``hyperplace`` command: a thin shell over the library.

Each command group lives in its own module under :mod:`hyperplace.commands` and is mounted
here. Bad input never shows a traceback: :class:`InputError` becomes one line
on stderr and exit code 2.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import typer

from hyperplace import deadline
from hyperplace.errors import InputError

from hyperplace.commands.common import EXIT_CODES_HELP

app = typer.Typer(
    name="hyperplace",
    help="Place foundation-model training jobs on heterogeneous GPU clusters and federations. "
    + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"hyperplace {version('hyperplace')}")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            from hyperplace import __version__
            print(f"hyperplace {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="print the version and exit"),
) -> None:
    pass


def _mount() -> None:
    from hyperplace.commands import (
        calibrate,
        defrag,
        estimate,
        federate,
        instances,
        manifests,
        plan,
        predict,
        repair,
        simulate,
        solve,
        split,
        whatif,
        why,
    )

    instances.register(app)
    solve.register(app)
    manifests.register(app)
    why.register(app)
    simulate.register(app)
    whatif.register(app)
    app.add_typer(split.app, name="split")
    federate.register(app)
    estimate.register(app)
    predict.register(app)
    plan.register(app)
    calibrate.register(app)
    defrag.register(app)
    repair.register(app)


#: One line per command in ``hyperplace -h`` (the list cuts longer first sentences with
#: "..."); each command's own -h has its full help. A command not listed here gets the
#: first clause of its help.
SHORT_HELP = {
    "validate": "check Instance, Cluster, job, queue and Kubernetes files",
    "solve": "one scheduling round: which pending jobs run, on which GPUs",
    "why": "why a job is pending, and the smallest change that admits it",
    "check": "check a plan with the independent checker",
    "manifests": "a plan as DRA claims + Volcano Jobs, or sbatch scripts",
    "simulate": "replay a trace under the engine and its peers, side by side",
    "whatif": "what-if sweeps, resumable, one SQLite row per scenario",
    "federate": "split jobs across member clusters, as placed",
    "estimate": "replicas of a job that fit in each member cluster now",
    "predict": "step time, tokens/s, MFU and memory of one configuration",
    "plan": "best parallel configurations of a model on an allocation",
    "calibrate": "refit the cost model to profiles and observed step times",
    "defrag": "migrate running jobs so that a job fits or free domains grow",
    "repair": "re-place the running jobs that hold failed GPUs",
    "serve": "the solver service over HTTP",
    "instances": "list, show, export, generate and import instances",
    "split": "split a model's layers over heterogeneous pipeline stages",
    "instances list": "the bundled instances: size, free GPUs, pending jobs",
    "instances show": "GPUs by state, domains per tier, fragmentation",
    "instances export": "write an instance as one Instance document",
    "instances generate": "a seeded synthetic instance (Philly job sizes)",
    "instances import": "build a Cluster file from a real cluster's files",
}


def _short(text: str | None, limit: int = 60) -> str | None:
    """The first clause of a help text, at most ``limit`` characters, never cut mid-word."""
    if not text:
        return None
    first = text.strip().split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".")
    for sep in (": ", "; ", " ("):
        if len(first) <= limit:
            break
        first = first.split(sep)[0]
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0]
    return first


def _short_helps(typer_app: typer.Typer = app, prefix: str = "") -> None:
    for info in typer_app.registered_commands:
        name = prefix + (info.name or (info.callback.__name__ if info.callback else ""))
        if info.short_help is None:
            info.short_help = SHORT_HELP.get(name) or _short(
                info.help or (info.callback.__doc__ if info.callback else None))
    for group in typer_app.registered_groups:
        name = prefix + (group.name or "")
        if not isinstance(group.short_help, str):
            group.short_help = SHORT_HELP.get(name) or _short(
                group.typer_instance.info.help if group.typer_instance else None)
        if group.typer_instance is not None:
            _short_helps(group.typer_instance, name + " ")


_mount()


def _mount_service() -> None:
    from hyperplace.commands import serve  # the solver service (#15)

    serve.register(app)


_mount_service()
_short_helps()


def _caused_by_interrupt(exc: BaseException) -> bool:
    """True when a KeyboardInterrupt is somewhere in the exception's cause chain."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


_built: tuple[tuple[int, int], Callable[..., Any]] | None = None


def _command() -> Callable[..., Any]:
    """The click command tree of :data:`app`, built once per process: ``app(...)`` builds it
    anew on every call (every command's signature and type hints, 0.06-0.09 s), which an
    in-process caller (the tests, ``run_main``) paid on every command it ran. Rebuilt if
    commands are mounted after it was built."""
    global _built
    key = (len(app.registered_commands), len(app.registered_groups))
    if _built is None or _built[0] != key:
        _built = (key, typer.main.get_command(app))
    return _built[1]


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A file's deprecated key (``errors.DeprecatedKey``) as one ``warning:`` line; other
    warnings as Python shows them."""
    if category.__name__ == "DeprecatedKey":
        print(f"warning: {message}", file=sys.stderr)
    else:
        _PYTHON_SHOW_WARNING(message, category, filename, lineno, file, line)


_PYTHON_SHOW_WARNING = warnings.showwarning


def main() -> None:
    """Console-script entry point: errors are one line on stderr, never a traceback."""
    deadline.started_as_command()  # budgets run from process start (reading counts)
    warnings.showwarning = _show_warning
    try:
        from hyperplace.commands.common import check_repeated_options

        check_repeated_options(_command(), sys.argv[1:])
        code = _command()(standalone_mode=False)
    except InputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click's (or typer's vendored click's) usage errors
        if _caused_by_interrupt(exc):
            # Ctrl-C inside a native module's import (OR-Tools is loaded when a solve needs
            # it) surfaces as "ImportError: initialization failed" caused by the interrupt
            sys.exit(130)
        kind = type(exc).__name__
        ctx = getattr(exc, "ctx", None)
        if kind == "NoArgsIsHelpError":  # bare `hyperplace`: show the help
            print(ctx.get_help() if ctx else "", file=sys.stderr)
            sys.exit(2)
        if kind == "Abort":
            sys.exit(130)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            where = f"{ctx.command_path}: " if ctx is not None else ""
            message = exc.format_message().replace("Value error, ", "")
            print(f"error: {where}{message}", file=sys.stderr)
            sys.exit(exc.exit_code or 2)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
