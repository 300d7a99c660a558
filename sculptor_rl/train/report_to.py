"""Where a trainer reports its logs (`report_to`): by default every integration of those the project offers that is
installed (tensorboard, a dependency; wandb and trackio, the extras `sculptor-rl[wandb]` / `[trackio]`). A config
that names an integration that is not installed fails when the config is read, in one line: transformers would
raise only when it builds the callback, after the model has loaded (minutes for an 8B model)."""

from __future__ import annotations

OFFERED = ("tensorboard", "wandb", "trackio")  # the default's candidates, in this order
HELP = ("integrations to log to (tensorboard, wandb, trackio, ...; 'none'); default: those of tensorboard, wandb "
        "and trackio that are installed")
EXTRAS = {"wandb": "pip install 'sculptor-rl[wandb]'", "trackio": "pip install 'sculptor-rl[trackio]'"}


def installed() -> list[str]:
    """The integrations transformers finds installed (any it supports, not only the offered ones)."""
    from transformers.integrations import get_available_reporting_integrations

    return get_available_reporting_integrations()


def resolve(report_to: None | str | list[str]) -> list[str]:
    """The integrations a run reports to: None (unset) means the offered ones that are installed; "none" none;
    "all" every installed one. ValueError naming each one asked for that is not installed."""
    if report_to is None:
        available = installed()
        return [name for name in OFFERED if name in available]
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if names in (["none"], []):
        return []
    if names == ["all"]:
        return installed()
    missing = [name for name in names if name not in installed()]
    if missing:
        raise ValueError("report_to: " + "; ".join(
            f"{name} is not installed ({EXTRAS.get(name, f'install {name}')}, or drop it from report_to)"
            for name in missing))
    return names
