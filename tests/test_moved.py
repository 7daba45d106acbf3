"""Import paths from before 0.2's layout keep working for one release, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from electra import _moved


@pytest.mark.parametrize("old", sorted(_moved.SPLIT))
def test_every_name_of_a_split_module_is_found_in_its_new_home(old: str) -> None:
    module = importlib.import_module(old)
    for name, new in _moved.SPLIT[old].items():
        if name in vars(module):  # a module that stayed and still imports the name
            value = getattr(module, name)
        else:
            with pytest.warns(DeprecationWarning, match=f"moved to {new}"):
                value = getattr(module, name)
        assert value is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_a_module_that_moved_whole_is_the_new_one_under_its_old_name(old: str) -> None:
    new = importlib.import_module(_moved.MOVED[old])
    public = [n for n in vars(new) if not n.startswith("_")][:5]
    module = importlib.import_module(old)
    for name in public:
        with pytest.warns(DeprecationWarning):
            assert getattr(module, name) is getattr(new, name)


def test_from_import_of_an_old_path_works_and_an_unknown_name_says_where_to_look() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    from electra.train import Trainer\n"
        "except DeprecationWarning as w: print('W', w)\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "from electra.train import Trainer, load_config\n"
        "from electra.pretrain.trainer import Trainer as T; assert Trainer is T\n"
        "try:\n    from electra.train import no_such_name\n"
        "except ImportError as e: print('E', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "W electra.train.Trainer moved to electra.pretrain.trainer.Trainer" in out
    assert "E cannot import name 'no_such_name' from 'electra.train'" in out
    assert "electra.pretrain.config" in out  # where its names went


def test_new_modules_are_untouched_and_probes_are_plain_attribute_errors() -> None:
    import electra.config

    assert not hasattr(electra.config, "__all__")
    with pytest.raises(AttributeError):
        _moved.moved_attribute("electra.model", "__path__")


def test_the_two_parameter_groups_have_their_own_names_and_the_old_ones_warn() -> None:
    from torch import nn

    from electra.finetune import recipe
    from electra.model import optim

    model = nn.Linear(3, 2)
    with pytest.warns(DeprecationWarning, match="weight_decay_groups"):
        old = optim.parameter_groups(model, 0.01)
    assert [len(g["params"]) for g in old] == [
        len(g["params"]) for g in optim.weight_decay_groups(model, 0.01)
    ]
    with pytest.warns(DeprecationWarning, match="layerwise_groups"):
        recipe.parameter_groups(model, 1e-3, 0.8, 0)
