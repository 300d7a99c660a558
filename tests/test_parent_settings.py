"""Every setting of TRL's GRPOConfig and SFTConfig (transformers' TrainingArguments included) is honoured or refused
by the config check with one line naming it and what to use instead; none is silently ignored."""

import dataclasses

import pytest
from trl import GRPOConfig, SFTConfig

from sculptor_rl.train.parent_settings import RL_HONOURED, RL_REFUSED, SFT_HONOURED, SFT_REFUSED
from sculptor_rl.train.rl import SculptorGRPOConfig, check_config
from sculptor_rl.train.sft import SculptorSFTConfig

TABLES = {"rl": (GRPOConfig, RL_HONOURED, RL_REFUSED), "sft": (SFTConfig, SFT_HONOURED, SFT_REFUSED)}


@pytest.mark.parametrize("which", list(TABLES))
def test_every_parent_field_is_honoured_or_refused(which):
    parent, honoured, refused = TABLES[which]
    names = {f.name for f in dataclasses.fields(parent)}
    assert not honoured & set(refused)
    assert names - honoured - set(refused) == set(), "neither honoured nor refused"
    assert (honoured | set(refused)) - names == set(), "not a field of TRL's config"


def other_value(value):
    """A value unlike `value`, of a fitting kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, dict):
        return {**value, "other": 1}
    if isinstance(value, list):
        return [*value, "other"]
    return 0.5 if value is None else "other"


def test_rl_validate_refuses_each_setting_it_does_not_honour():
    """`rl validate`'s check (check_config): one line per refused setting, naming it and what to use instead."""
    for name, instead in RL_REFUSED.items():
        cfg = SculptorGRPOConfig(output_dir="/tmp/unused", tasks="t.jsonl", use_cpu=True, report_to="none")
        setattr(cfg, name, other_value(getattr(cfg, name)))
        with pytest.raises(ValueError) as e:
            check_config(cfg)
        assert f"- {name} = " in str(e.value) and instead in str(e.value), name


def test_sft_config_refuses_each_setting_it_does_not_honour():
    base = SculptorSFTConfig(output_dir="/tmp/unused", use_cpu=True, report_to="none")
    for name, instead in SFT_REFUSED.items():
        cfg = dataclasses.replace(base)
        setattr(cfg, name, other_value(getattr(cfg, name)))
        with pytest.raises(ValueError) as e:
            cfg.__post_init__()
        assert f"- {name} = " in str(e.value) and instead in str(e.value), name


def test_liger_kernel_is_refused_by_rl_validate(tmp_path, capsys):
    from sculptor_rl.train.rl import main

    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(SystemExit) as e:
        main(["validate", "--tasks", str(tmp_path / "t.jsonl"), "--output_dir", str(tmp_path), "--report_to", "none",
              "--use_liger_kernel", "true"])
    assert "use_liger_kernel = True is not honoured" in str(e.value)
