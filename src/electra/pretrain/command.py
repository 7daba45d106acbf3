"""``electra pretrain``: the command users leave running for days."""

from __future__ import annotations

import json

import torch.distributed as dist

from electra.config import ConfigError
from electra.pretrain.config import load_config
from electra.pretrain.options import PretrainCommand
from electra.pretrain.trainer import Trainer


def pretrain_cli(cmd: PretrainCommand) -> int:
    """Run ``electra pretrain`` (its ``--help`` is :class:`~electra.pretrain.options.PretrainCommand`'s docstring)."""
    overrides = list(cmd.set)
    if cmd.data:
        overrides.append(f"data.blocks={json.dumps(cmd.data)}")
    if cmd.output:
        overrides.append(f"run.output_dir={json.dumps(cmd.output)}")
    if cmd.objective:
        overrides.append(f"objective.objective={json.dumps(cmd.objective)}")
    if cmd.init_from:
        overrides.append(f"init.discriminator={json.dumps(cmd.init_from)}")
    if cmd.init_generator:
        if not cmd.init_from:
            raise ConfigError("--init-generator needs --init-from (the discriminator directory)")
        overrides.append(f"init.generator={json.dumps(cmd.init_generator)}")
    cfg = load_config(cmd.config, [*overrides, *cmd.flags.items()])
    summary = Trainer(cfg, resume=cmd.resume).fit()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0 if summary else 1
