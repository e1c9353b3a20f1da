"""The corpus of published config.json files (tests/fixtures/corpus): well formed, broad enough, indexed,
and every config either read by the planner's own reader or refused by it with a message that names the problem."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))

import corpus_index  # noqa: E402

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models  # noqa: E402

CORPUS = corpus_index.load()


def test_corpus_has_enough_files():
    assert len(CORPUS) >= corpus_index.MINIMUM_FILES, f"{len(CORPUS)} files; the issue asks for at least {corpus_index.MINIMUM_FILES}"


@pytest.mark.parametrize("slug", sorted(CORPUS))
def test_file_is_well_formed(slug):
    assert corpus_index.problems(slug, CORPUS[slug]) == []


def test_problems_are_found():
    # the checker itself: a file without a source, with an unknown category and no model_type is named
    bad = {"model": "x/y", "source": "", "categories": ["dense", "quantum"], "config": {"architectures": ["A"]}}
    found = " ".join(corpus_index.problems("bad", bad))
    assert "source must be" in found and "unknown categories ['quantum']" in found and "no model_type" in found
    refusing = {"model": "x/y", "source": "https://x", "categories": ["float16-refusing"],
                "config": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}}
    assert "float16-refusing but no model_type" in " ".join(corpus_index.problems("r", refusing))


@pytest.mark.parametrize("category,minimum", sorted(corpus_index.MINIMUM.items()))
def test_minimum_count_per_category(category, minimum, capsys):
    have = corpus_index.counts(CORPUS)[category]
    if have >= minimum:
        assert category not in corpus_index.SHORTFALL, f"{category} has {have} files now: drop it from SHORTFALL"
        return
    # a shortfall is allowed only when it is written down with its reason (and shown in the README)
    assert category in corpus_index.SHORTFALL, f"{category}: {have} files, the corpus needs at least {minimum}"
    with capsys.disabled():
        print(f"\ncorpus SHORTFALL {category}: {have} of {minimum} - {corpus_index.SHORTFALL[category]}")


def test_shortfalls_name_known_categories():
    assert set(corpus_index.SHORTFALL) <= set(corpus_index.MINIMUM)
    assert all(len(reason) > 40 for reason in corpus_index.SHORTFALL.values())


def test_both_kinds_of_pooling_model():
    n = corpus_index.counts(CORPUS)
    assert n["pooling-embed"] >= 2 and n["pooling-classify"] >= 2


def test_float16_refusing_category_matches_vllm_list():
    # every config whose model_type vLLM refuses in float16 carries the category, and only those
    for slug, doc in CORPUS.items():
        refused = bool(corpus_index.FLOAT16_REFUSED_MODEL_TYPES & set(corpus_index.model_types(doc["config"])))
        assert refused == ("float16-refusing" in doc["categories"]), slug


def test_few_excerpts():
    excerpts = [slug for slug, doc in CORPUS.items() if doc.get("excerpt")]
    assert len(excerpts) <= corpus_index.MAX_EXCERPTS, excerpts


def test_no_two_files_hold_the_same_config():
    seen = {}
    for slug, doc in CORPUS.items():
        key = json.dumps(doc["config"], sort_keys=True)
        assert key not in seen, f"{slug} and {seen.get(key)} hold the same config.json"
        seen[key] = slug


def test_readme_is_generated_from_the_files():
    assert corpus_index.main(["--check"]) == 0, "run python tests/tools/corpus_index.py"


def test_every_config_is_read_or_refused_by_the_planner(capsys):
    read, refused, crashed = [], [], []
    for slug, doc in CORPUS.items():
        try:
            profile = models.profile_from_config(doc["config"], doc["model"])
        except models.ModelError as e:
            message = str(e)
            # the message names the model and says which key or kind is the problem
            assert doc["model"] in message and len(message) > len(doc["model"]) + 10, (slug, message)
            refused.append((slug, message))
        except Exception as e:  # noqa: BLE001 - a crash is a planner bug, reported below
            crashed.append((slug, f"{type(e).__name__}: {e}"))
        else:
            assert profile.num_layers > 0 and profile.hidden_size > 0, slug
            read.append(slug)
    with capsys.disabled():
        print(f"\ncorpus: {len(read)} read by profile_from_config, {len(refused)} refused, {len(crashed)} crashed")
        for slug, message in refused:
            print(f"  refused {slug}: {message}")
        for slug, message in crashed:
            print(f"  CRASHED {slug}: {message}")
    assert crashed == [], "profile_from_config must refuse with ModelError, not crash: " + repr(crashed)
