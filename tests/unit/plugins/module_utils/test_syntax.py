"""_syntax (issue 35): one check per file syntax the collection writes an inventory string into, and the served model name's
rule. Each check is held against the real consumer: nginx -t parses a gateway whose served name uses every character the
rule allows, _units renders (and systemd-analyze verifies) what unit_value lets through and refuses what it refuses, and
_serving.env_file writes one line per variable for what env_value lets through."""

from __future__ import annotations

import shlex

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _serving as serving
from ansible_collections.llmfleet.serving.plugins.module_utils import _syntax as syntax
from ansible_collections.llmfleet.serving.plugins.module_utils import _units as units

from test_gateway import _nginx_t, _render

# every character class the name rule allows, at its longest
ODD_NAME = "Qwen/Qwen3-8B_v2.1:fp8@main+x" + "a" * (128 - 29)


@pytest.mark.parametrize("name", ["qwen3", "Qwen/Qwen3-8B", "qwen3:8b", "org/model@rev", "a", "Model+lora", ODD_NAME])
def test_a_served_name_of_the_rule_passes(name):
    assert syntax.served_name(name) is None


@pytest.mark.parametrize("name", ["x\nserver { listen 80; }", "x{", "x}", "x;", "a b", "x$y", "x#y", "x'y", 'x"y', "x\\y",
                                  "-x", ".x", "", ODD_NAME + "b", "x\r", "x\t", "\u00e9", 3, None])
def test_a_served_name_outside_the_rule_is_refused_saying_the_rule(name):
    problem = syntax.served_name(name)
    assert problem and "letters, digits and . _ - / : @ +" in problem


@pytest.mark.parametrize("value", ["127.0.0.1:8002", "10s", "/models/Qwen3-8B", "Qwen/Qwen3-8B:fp8@main+x"])
def test_an_nginx_word_passes(value):
    assert syntax.nginx_word(value) is None


@pytest.mark.parametrize("value, named", [("a b", "' '"), ("a;b", "';'"), ("a{", "'{'"), ("}", "'}'"), ("#x", "'#'"), ("'x", "\"'\""),
                                          ('"x', "'\"'"), ("a\\b", repr("\\")), ("$host", "'$'"), ("a\nb", "control character"),
                                          ("", "empty"), (True, "a bool")])
def test_a_value_nginx_reads_as_syntax_is_refused_naming_the_character(value, named):
    problem = syntax.nginx_word(value)
    assert problem and named in problem


def test_the_served_name_rule_renders_a_gateway_nginx_accepts(tmp_path):
    """The rule's every character, through the real templates into a config `nginx -t` accepts, one upstream per name."""
    instance = {"name": "d-0", "port": 8002, "bind_address": "127.0.0.1", "served_model_name": ODD_NAME}
    plan = {"host": "h", "errors": [], "deployments": [{"name": "d", "model": "Qwen/Qwen3-8B", "served_model_name": ODD_NAME,
                                                        "instances": [instance]}]}
    model = gw.gateway_model({"h": plan}, "h")
    assert model["errors"] == [] and list(model["routes"]) == [ODD_NAME]
    root = _render(tmp_path, model)
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    assert f"# model {ODD_NAME}\n" in (root / "llmfleet" / "gateway.conf").read_text()


@pytest.mark.parametrize("value", ["--chat-template-content-format", '{"temperature": 0.5}', "a b", "50%", "$HOME", "a\\b", "x;y",
                                   'say "hi"'])
def test_what_unit_value_lets_through_a_unit_carries(value):
    assert syntax.unit_value(value) is None
    word = units.exec_quote(value)
    # systemd's own splitting (shlex reads the same double-quote rules for these) gives the one word back
    assert [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(word)] == [value]


@pytest.mark.parametrize("value", ["a\nExecStartPre=/bin/sh -c id", "a\rb", "a\tb", "a\x00b", "a\x7fb"])
def test_what_unit_value_refuses_the_unit_renderer_refuses_too(value):
    assert syntax.unit_value(value)
    with pytest.raises(units.UnitError):
        units.exec_quote(value)
    with pytest.raises(units.UnitError):
        units.setting("Description", value)


@pytest.mark.parametrize("value", ["DEBUG", "a b", 'q"uote', "$HOME", "back\\slash", "50%"])
def test_what_env_value_lets_through_is_one_line_of_the_environment_file(value):
    assert syntax.env_value(value) is None
    assert serving.env_file({"X": value}).count("\n") == 1


@pytest.mark.parametrize("value", ["1\nVLLM_SERVER_DEV_MODE=1", "a\rb", "a\x00b"])
def test_env_value_refuses_a_second_line_and_so_does_the_environment_file(value):
    """A carriage return ends a line of an EnvironmentFile as a newline does (before this issue env_file let it through)."""
    assert "control character" in syntax.env_value(value)
    with pytest.raises(serving.ServingError, match="control character"):
        serving.env_file({"X": value})


def test_systemd_reads_back_a_unit_whose_words_passed_unit_value(tmp_path):
    """The vLLM unit of an instance whose extra arguments use quotes, blanks, '%', '$' and ';': systemd-analyze verify
    accepts it (the tool is what test_units.py uses)."""
    from test_units import stand_in, verify  # pylint: disable=import-outside-toplevel

    python = stand_in(tmp_path / "venv" / "bin" / "python")
    instance = {"name": "d-0", "port": 8002, "bind_address": "127.0.0.1", "stop_timeout_s": 130, "served_model_name": "d",
                "args": ["/models/d", "--host", "127.0.0.1", "--port", "8002", "--override-generation-config", '{"a": "b c"}',
                         "--x", "50%", "--y", "$HOME;z"]}
    text = serving.systemd_unit(instance, python=python, env_path=str(tmp_path / "env"), cache_dir=str(tmp_path), user="root")
    path = tmp_path / "llmfleet-vllm-d-0.service"
    path.write_text(text)
    (tmp_path / "env").write_text("")
    assert verify([path]) == []
