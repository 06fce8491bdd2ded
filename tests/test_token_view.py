"""Every token's fate on the page: the fates follow the decode walk ``evaluate`` scores, the page shows exactly the
per-prompt τ ``evaluate`` writes, a draft with a broken vocab mapping lights up nothing, token classes are counted."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.data.dataset import build_dataset
from eagle3kit.draft.config import DraftSpec
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate import fates, scores, token_classes
from eagle3kit.evaluate.benchmarks import held_out_set, load_set, render
from eagle3kit.evaluate.export import reload
from eagle3kit.evaluate.token_page import comparison_table, one_round_more, page, prompt_html, vllm_line
from eagle3kit.evaluate.token_viewer import TokenViewer
from eagle3kit.evaluate.verifier_states import load_states, save_states
from eagle3kit.masks.eagle_mask import round_up_to_block
from eagle3kit.train.overfit import CONVERSATION, one_conversation
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_model, load_tokenizer

K = 3
NEW_TOKENS = 40


def _perfect(sequence: list[int], k: int) -> torch.Tensor:
    t = len(sequence)
    return torch.tensor([[sequence[j + 2 + i] if j + 2 + i < t else 0 for j in range(t - 1)] for i in range(k)])


# ----------------------------------------------------------------------------------------------- the fates
def test_a_perfect_draft_is_accepted_at_every_depth_then_the_bonus():
    seq = list(range(100, 120))  # prompt of 5; the walk of tests/test_evaluate.py: rounds accept 3, 3, 3, 1
    got = fates.fates_of(_perfect(seq, 3), seq, 5, 3)
    kinds = [(f.kind, f.depth) for f in got]
    assert kinds[0] == (fates.FIRST, 0)
    assert kinds[1:5] == [(fates.ACCEPTED, 1), (fates.ACCEPTED, 2), (fates.ACCEPTED, 3), (fates.BONUS, 0)]
    assert [f.token for f in got] == seq[5:]
    assert sum(f.kind == fates.CORRECTED for f in got) == 0


def test_a_rejected_proposal_is_the_verifiers_token_with_the_drafts_guess():
    seq = list(range(50))
    tokens = _perfect(seq, 3)
    tokens[1] = -7  # the second draft token is always wrong
    got = fates.fates_of(tokens, seq, 10, 3)
    corrected = [f for f in got if f.kind == fates.CORRECTED]
    assert corrected and all(f.proposed == -7 for f in corrected)
    assert all(f.depth == 1 for f in got if f.kind == fates.ACCEPTED)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=4, max_size=40), st.integers(1, 5), st.integers(1, 4),
       st.randoms(use_true_random=False))
def test_fates_count_what_the_walk_scores(sequence, prompt_len, k, rnd):
    prompt_len = min(prompt_len, len(sequence) - 2)
    tokens = torch.tensor([[rnd.randint(0, 3) for _ in range(len(sequence) - 1)] for _ in range(k)])
    acc = ev.acceptance_of(tokens, sequence, prompt_len, k)
    view = fates.PromptView("p", "c", sequence[:prompt_len], fates.fates_of(tokens, sequence, prompt_len, k), k)
    assert view.reply == sequence[prompt_len:]
    assert (view.rounds, view.accepted) == (len(acc.walk_accepted), sum(acc.walk_accepted))
    assert view.histogram() == [acc.walk_accepted.count(j) for j in range(k + 1)]
    assert sum(view.by_depth()) == view.accepted


# ----------------------------------------------------------------------------------------------- token classes
class _Chars:
    """A tokenizer whose tokens are the strings of a list: ``decode([i])`` is ``texts[i]``."""

    def __init__(self, texts):
        self.texts = texts

    def decode(self, ids, **_):
        return "".join(self.texts[i] for i in ids)


def test_token_classes_are_counted_from_the_text_and_the_draft_vocab():
    texts = [" Hello", "world", " 42", ",", "\n```", "def", " f", "():", "```", " the"]
    got = token_classes.classes_of(texts, list(range(len(texts))), torch.tensor([True] * 9 + [False]))
    assert token_classes.WORD_START in got[0] and token_classes.WORD_START not in got[1]
    assert got[2] == {token_classes.NUMBER}
    assert got[3] == {token_classes.PUNCTUATION}
    assert token_classes.CODE in got[5] and token_classes.CODE in got[7] and token_classes.CODE not in got[9]
    assert got[9] == {token_classes.WORD_START, token_classes.OUTSIDE}


def test_the_class_table_counts_failures_and_stays_silent_on_absent_classes():
    texts = [" One", " two", " 3", ".", " four", " 5"]
    tok = _Chars(texts)
    fs = [fates.Fate(0, fates.FIRST), fates.Fate(1, fates.ACCEPTED, 1, round=0),
          fates.Fate(2, fates.CORRECTED, proposed=0, round=0), fates.Fate(3, fates.ACCEPTED, 1, round=1),
          fates.Fate(4, fates.ACCEPTED, 2, round=1), fates.Fate(5, fates.CORRECTED, proposed=1, round=1)]
    view = fates.PromptView("p", "c", [], fs, 3)
    table = token_classes.class_table([view], tok)
    assert table.loc[token_classes.ALL, ["targets", "failed"]].tolist() == [5, 2]
    assert table.loc[token_classes.NUMBER, ["targets", "accepted", "failed"]].tolist() == [2, 0, 2]
    assert table.loc[token_classes.NUMBER, "share of failures"] == 1.0
    assert table.loc[token_classes.CODE, "targets"] == 0  # no fence: nothing counted as code
    assert table.loc[token_classes.OUTSIDE, "targets"] == 0  # a full-vocab draft: nothing outside it
    assert "No class the draft can propose has" in token_classes.worst_line(table)  # 2 number targets: too few
    assert "outside the draft vocab" not in token_classes.worst_line(table)  # silent when nothing lies outside it
    # a target outside the draft vocab counts there alone: the other classes' rates are of what the draft can propose
    outside = torch.tensor([True, True, False, True, True, True])  # token 2 (" 3") lies outside the draft vocab
    capped = token_classes.class_table([view], tok, outside)
    assert capped.loc[token_classes.OUTSIDE, ["targets", "failed"]].tolist() == [1, 1]
    assert capped.loc[token_classes.NUMBER, ["targets", "failed"]].tolist() == [1, 1]  # " 5" alone
    assert capped.loc[token_classes.ALL, ["targets", "failed"]].tolist() == [5, 2]


def test_tau_adds_up_by_depth_and_counts_the_rejected_first_proposals():
    texts = [" One", " two", " 3", ".", " four", " 5"]
    fs = [fates.Fate(0, fates.FIRST), fates.Fate(1, fates.ACCEPTED, 1, round=0),
          fates.Fate(2, fates.CORRECTED, proposed=0, round=0), fates.Fate(3, fates.CORRECTED, proposed=1, round=1),
          fates.Fate(4, fates.CORRECTED, proposed=1, round=2), fates.Fate(5, fates.BONUS, round=3)]
    view = fates.PromptView("p", "c", [], fs, 3)
    outside = torch.tensor([True, True, True, False, True, True])  # token 3 (".") lies outside the draft vocab
    line = token_classes.how_tau_adds_up([view], _Chars(texts), outside)
    assert line.startswith(f"How τ {view.tau:.2f} adds up over 1 prompt (4 rounds): 1 (the verifier's own token, "
                           "every round) + 0.25 + 0.00 + 0.00")
    # rounds 1 and 2 rejected their first proposal; round 0 accepted it; round 3 met the reply's end first
    assert "accepted in 1 of the 4 rounds (the 0.25 above) and rejected in 2 (50%)" in line
    assert "1 round met the reply's end before a proposal was checked" in line
    assert "1 of those 2 rejected tokens (50%) lie outside the draft vocab" in line
    perfect = list(range(100, 120))
    clean = fates.PromptView("p", "c", perfect[:5], fates.fates_of(_perfect(perfect, 3), perfect, 5, 3), 3)
    said = token_classes.how_tau_adds_up([clean], _Chars([str(i) for i in range(120)]))
    assert "accepted in 4 of the 4 rounds (the 1.00 above) and rejected in 0 (0%)" in said
    assert "outside" not in said and "met the reply's end" not in said  # silent where nothing was rejected
    assert "+ 1.00 + 0.75 + 0.75 (draft" in said  # rounds accept 3, 3, 3 and 1: depth 1 in 4 rounds, 2 and 3 in 3
    assert token_classes.how_tau_adds_up([], _Chars(texts)).startswith("No round was taken")


def test_the_vllm_comparison_shows_only_the_prompts_that_differ_and_counts_the_rest():
    seq = list(range(100, 120))
    fs = fates.fates_of(_perfect(seq, 3), seq, 5, 3)  # rounds accept 3, 3, 3, 1
    reply, hist = [f.token for f in fs], [0, 1, 0, 3]

    def view(name, output, histogram):
        return fates.PromptView(name, "c", seq[:5], fs, 3, vllm_histogram=histogram, vllm_output=output)

    views = [view("agrees", reply, hist), view("other counts", reply, [1, 0, 0, 3]),
             view("other reply", reply[:-1] + [0], hist), fates.PromptView("no vllm", "c", seq[:5], fs, 3)]
    assert len(comparison_table(views)) == 3  # the prompt vLLM did not run is left out
    assert comparison_table(views, only_differing=True)["prompt"].tolist() == ["other counts", "other reply"]
    assert "equals the simulated reply on 2; on those, its per-request counts (rounds by accepted tokens) equal the " \
           "simulation's on 1" in vllm_line(views)
    assert comparison_table(views[:1], only_differing=True).empty and vllm_line(views[3:]) == ""
    two_sets = [view("held-out/0", reply, hist), view("held-out/1", reply, hist), view("mt-bench/81", reply, hist)]
    assert vllm_line(two_sets).startswith("vLLM beside the simulation, 3 prompts (2 held-out, 1 mt-bench): ")
    assert vllm_line(two_sets[:2]).startswith("vLLM beside the simulation, 2 prompts: ")  # one set: said once
    # vLLM counts the last round's accepted tokens before it cuts the output: one round with more accepted (or one
    # round more) is that end effect; one round with fewer accepted (the "other counts" view) is not
    end = view("last round", reply, [0, 0, 0, 4])
    assert one_round_more(end) and one_round_more(view("a round more", reply, [0, 1, 0, 4]))
    assert not one_round_more(views[1]) and not one_round_more(view("two rounds", reply, [0, 0, 0, 5]))
    said = vllm_line([views[0], views[1], end])
    assert "vLLM's τ is the higher on 1 of 2. On 1 of them one round explains it" in said
    assert f"(τ higher by {end.vllm_tau - end.tau:.3f} on average there)" in said and "The other 1 are not" in said


def test_targets_outside_the_draft_vocab_are_named_as_a_cap_not_as_where_the_draft_fails_most():
    """Tokens outside the draft vocab always fail (the draft cannot propose them): the sentence names the worst class
    the draft can propose and gives the outside share beside it (notebook 07's demo: 279 of 984 targets)."""
    rows = {token_classes.WORD_START: (40, 30), token_classes.NUMBER: (10, 6), token_classes.PUNCTUATION: (20, 10),
            token_classes.CODE: (0, 0), token_classes.OUTSIDE: (25, 25), token_classes.ALL: (100, 60)}
    table = pd.DataFrame([{"class": c, "targets": n, "failed": f, "failure rate": f / n if n else float("nan")}
                          for c, (n, f) in rows.items()]).set_index("class")
    line = token_classes.worst_line(table)
    # 30/40 word starts against 6/10 numbers: the intervals overlap, so no class is named (issue 50: no ordering
    # where the intervals do not separate), each with its interval
    assert line.startswith("By class, no kind of token stands out: no two of the 95 % intervals of the failure "
                           "rates separate") and "word start 30/40 (" in line
    # the demo's counts (issue 50's review): the worst rate, number 19/22, reaches every other interval, yet word
    # start's (73–80 %) lies above punctuation's (58–72 %): that difference is stated, not "none stands out"
    demo = table.copy()
    for c, (n, f) in {token_classes.WORD_START: (629, 484), token_classes.NUMBER: (22, 19),
                      token_classes.PUNCTUATION: (170, 111), token_classes.CODE: (69, 44)}.items():
        demo.loc[c, ["targets", "failed"]] = [n, f]
    demo["failure rate"] = demo["failed"] / demo["targets"]
    said = token_classes.worst_line(demo)
    assert said.startswith("By class, one difference is measured: word start tokens (word start 484/629 (") and \
        "fail more often than punctuation 111/170 (" in said and "stands out" not in said, said
    assert "number 19/22 (" in said and "cannot be told apart from word start" in said
    demo.loc[token_classes.NUMBER, ["targets", "failed"]] = [19, 16]  # the review's 16/19: too few to compare
    demo["failure rate"] = demo["failed"] / demo["targets"]
    small = token_classes.worst_line(demo)  # too few to rank: named as such, never ranked (issue 50's review)
    assert "number 16/19: too few targets to compare (under 20)" in small and "than number" not in small
    assert small.startswith("By class, of those with at least 20 targets, it fails most on word start tokens") or \
        small.startswith("By class, one difference is measured: word start")
    apart = table.copy()
    apart.loc[token_classes.WORD_START, ["targets", "failed"]] = [100, 90]  # 83–94 % against number's 71–87 %
    apart.loc[token_classes.NUMBER, ["targets", "failed"]] = [100, 80]
    apart["failure rate"] = apart["failed"] / apart["targets"]
    said = token_classes.worst_line(apart)
    # word start's interval lies above punctuation's; number's reaches both: only the one difference is claimed
    assert said.startswith("By class, one difference is measured: word start tokens (word start 90/100 (")
    assert "fail more often than punctuation 10/20" in said and "number 80/100 (" in said
    assert "cannot be told apart" in said
    assert "fails most" not in said
    assert "25 of the 100 targets (25%) lie outside the draft vocab" in line
    clear = table.copy()
    clear.loc[token_classes.WORD_START, ["targets", "failed"]] = [400, 360]  # 90 % of 400 against 6/10 and 10/20
    clear["failure rate"] = clear["failed"] / clear["targets"]
    line = token_classes.worst_line(clear)
    assert line.startswith("By class, of those with at least 20 targets, it fails most on word start tokens: 360 of "
                           "400 failed (90%")


# ----------------------------------------------------------------------------------------------- a real draft
@pytest.fixture(scope="module")
def memorised(tiny_verifier, tmp_path_factory):
    """A reduced-vocab draft of the tiny verifier that memorised one conversation (the verifier's own reply), and a
    data directory holding that conversation twice: once held out (the prompt the page shows), once trained on."""
    base = tmp_path_factory.mktemp("fates")
    one_conversation("tiny", base / "one", reply_tokens=NEW_TOKENS, draft_vocab_size=1024)
    chat = conv.read_jsonl(base / "one" / CONVERSATION)[0]
    conv.write_jsonl(base / "twice.jsonl", [chat, chat])
    data = base / "data"
    build_dataset("tiny", data, n_conversations=1, seq_length=256, held_out=1, source=base / "twice.jsonl",
                  draft_vocab_size=1024, progress=False)
    session = TrainSession(data, DraftSpec(verifier="tiny", device="cpu", draft_vocab_size=1024), progress=False,
                           lr=3e-3, max_steps=30, total_seq_len=round_up_to_block(257), train_data_ratio=1.0,
                           scheduler_type="none")
    session.run(30)
    return session.export(base / "draft"), data


def _tensors_edited(src: Path, out: Path, edit) -> Path:
    shutil.copytree(src, out)
    tensors = load_file(str(out / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


class _Spans(HTMLParser):
    """Per prompt (``data-id``), the ``data-kind`` of each token span."""

    def __init__(self):
        super().__init__()
        self.kinds: dict[str, list[str]] = {}
        self._id = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "data-id" in a:
            self._id = a["data-id"]
            self.kinds[self._id] = []
        elif tag == "span" and "data-kind" in a:
            self.kinds[self._id].append(a["data-kind"])


def test_the_page_shows_evaluates_per_prompt_tau_on_every_prompt(memorised, tmp_path, capsys):
    draft, data = memorised
    out, shown = tmp_path / "scores.json", tmp_path / "page.html"
    code = main(["evaluate", "--draft", str(draft), "--data", str(data), "--bench", "held-out", "--bench", "mt-bench",
                 "--n-prompts", "4", "--max-new-tokens", str(NEW_TOKENS), "--json", str(out), "--show", str(shown)])
    assert code == 0 and "every token's fate" in capsys.readouterr().out
    records = scores.read_sets(out)
    html = shown.read_text()
    assert "http" not in html.replace("http-equiv", "") and "<script" not in html  # self-contained
    parser = _Spans()
    parser.feed(html)
    checked = 0
    for name, by_engine in records.items():
        for r in by_engine[draft.name]:
            kinds = parser.kinds[r.id]
            accepted = kinds.count(fates.ACCEPTED)
            rounds = kinds.count(fates.CORRECTED) + kinds.count(fates.BONUS)
            assert (rounds, accepted) == (r.rounds, r.accepted), (name, r.id)
            checked += 1
    assert checked == 5  # 1 held-out prompt + 4 MT-bench ones
    held = records["held-out"][draft.name][0]
    assert held.tau > 2.0, held  # the memorised conversation lights up: the test is not vacuous
    assert f"τ (bonus token counted) {held.tau:.3f}" in html


def _held_out_replies(data: Path):
    """The tiny verifier, its tokenizer, the data's held-out prompts, their ids and the verifier's replies."""
    verifier, tok = load_model("tiny"), load_tokenizer("tiny")
    prompts = held_out_set(conv.read_jsonl(Path(data) / "held_out.jsonl"))
    ids = render(tok, prompts)
    conts = ev.continuations(verifier, [torch.tensor([i]) for i in ids], NEW_TOKENS, tok.eos_token_id, progress=False)
    return verifier, tok, prompts, ids, conts


@pytest.mark.parametrize("breakage", ["d2t zeroed", "d2t one id off"])
def test_a_draft_with_a_broken_vocab_mapping_lights_up_nothing(memorised, tmp_path, breakage):
    draft, data = memorised
    edit = {"d2t zeroed": lambda t: t.update(d2t=torch.zeros_like(t["d2t"])),
            "d2t one id off": lambda t: t.update(d2t=t["d2t"] + 1)}[breakage]
    broken = _tensors_edited(draft, tmp_path / "broken", edit)
    verifier, tok, prompts, ids, conts = _held_out_replies(data)
    states: dict = {}
    healthy = fates.views_of(verifier, reload(draft), prompts, ids, conts, K, states)
    views = fates.views_of(verifier, reload(broken), prompts, ids, conts, K, states)
    assert sum(v.accepted for v in healthy) > 0
    assert sum(v.accepted for v in views) == 0 and all(v.tau == 1.0 for v in views)
    spans = _Spans()
    spans.feed(page({"broken": views}, tok, "broken"))
    assert fates.ACCEPTED not in sum(spans.kinds.values(), [])


def test_states_kept_beside_the_scored_file_give_the_same_views_without_a_verifier_forward(memorised, tmp_path):
    """Notebook 06 keeps the verifier's states of what it scored; 07 reads them and runs the draft alone."""
    draft, data = memorised
    verifier, tok, prompts, ids, conts = _held_out_replies(data)
    states: dict = {}
    fresh = fates.views_of(verifier, reload(draft), prompts, ids, conts, K, states)
    scored = tmp_path / "scored.json"
    save_states(states, scored, verifier.name_or_path)
    loaded = load_states(scored, verifier.name_or_path)
    assert loaded.keys() == states.keys() and len(loaded) == len(prompts)
    calls = []
    hook = verifier.register_forward_hook(lambda *_: calls.append(1))
    again = fates.views_of(verifier, reload(draft), prompts, ids, conts, K, loaded)
    hook.remove()
    assert calls == [] and [(v.tau, v.accepted) for v in again] == [(v.tau, v.accepted) for v in fresh]
    assert fresh[0].accepted > 0  # the memorised reply: equal views are not two empty ones
    assert load_states(scored, "another verifier") == {} and load_states(tmp_path / "none.json", "x") == {}


def test_the_widget_shows_the_prompt_picked(memorised):
    draft, _data = memorised
    verifier, tok, model = load_model("tiny"), load_tokenizer("tiny"), reload(draft)
    prompts = load_set("mt-bench", 2)
    ids = render(tok, prompts)
    conts = ev.continuations(verifier, [torch.tensor([i]) for i in ids], 12, tok.eos_token_id, progress=False)
    computed = []

    def view_at(i):
        computed.append(i)
        return fates.views_of(verifier, model, prompts[i:i + 1], ids[i:i + 1], conts[i:i + 1], K)[0]

    viewer = TokenViewer([p.id for p in prompts], view_at, tok, K)
    assert computed == [0] and prompts[0].id in viewer.page.value
    viewer.picker.value = 1
    assert computed == [0, 1] and prompts[1].id in viewer.page.value and prompts[0].id not in viewer.page.value
    viewer.picker.value = 0  # kept, not computed again
    assert computed == [0, 1] and viewer.page.value == prompt_html(viewer.views[0], tok)
    failing = TokenViewer(["x"], lambda i: (_ for _ in ()).throw(ValueError("no such prompt")), tok, K)
    assert "no such prompt" in failing.error and "no such prompt" in failing.page.value


def test_hover_names_what_the_draft_proposed_instead(tiny_verifier):
    tok = load_tokenizer("tiny")
    seq = [5, 6, 7, 8, 9, 10, 11, 12]
    tokens = _perfect(seq, 3)
    tokens[0, 2] = 1000  # the first round (4 tokens committed: the prompt + the prefill's) proposes id 1000 first
    view = fates.PromptView("p", "c", seq[:3], fates.fates_of(tokens, seq, 3, 3), 3)
    html = prompt_html(view, tok)
    corrected = re.findall(r'data-kind="corrected" title="([^"]*)"', html)
    assert corrected and repr(tok.decode([1000])).replace("'", "&#x27;") in corrected[0]
    depths = ", ".join(f"{n} at depth {d}" for d, n in enumerate(view.by_depth(), 1))  # the counts, each with its key
    assert f"the accepted draft tokens: {depths})" in html and "at depth 3" in depths


def test_the_vocab_cap_is_one_table_of_every_count_and_the_labs_rows_decide_the_size(tiny_verifier):
    """Notebook 07's table: 04's and 06's shares from their summaries, and here each set's reply tokens outside the
    vocab, the class table's outside targets and the rejected first proposals outside it, each count exact."""
    from eagle3kit.evaluate import vocab_cap
    from eagle3kit.evaluate.recipes import read_lab

    tok = load_tokenizer("tiny")

    def view(fated: list[tuple[int, str, int]]) -> fates.PromptView:  # (token, kind, round)
        return fates.PromptView("p", "c", [], [fates.Fate(t, kind, 1 if kind == fates.ACCEPTED else 0, round=r)
                                               for t, kind, r in fated], 3)

    inside = torch.zeros(tok.vocab_size if hasattr(tok, "vocab_size") else 1000, dtype=torch.bool)
    inside[:500] = True  # ids 500 and above lie outside the draft vocab
    held = [view([(10, fates.ACCEPTED, 0), (600, fates.CORRECTED, 0), (601, fates.CORRECTED, 1),
                  (11, fates.CORRECTED, 2)])]  # three first proposals rejected, two of them outside
    bench = [view([(12, fates.ACCEPTED, 0), (13, fates.ACCEPTED, 0)])]
    classes = token_classes.class_table(held + bench, tok, inside)
    fair = classes.loc[token_classes.PROPOSABLE]  # the classes' fair base: every target but the outside-vocab ones
    assert (fair["targets"], fair["failed"]) == (4, 1) and classes.loc[token_classes.ALL, "targets"] == 6
    assert token_classes.PROPOSABLE not in token_classes.class_table(held, tok).index  # a full-vocab draft: no row
    table = vocab_cap.cap_table({"held_out_coverage": 0.8}, {"outside_vocab_share": 0.19, "held_out_prompts": 16},
                                {"held-out": held, "mt-bench": bench}, classes, held, tok, inside)
    rows = {over: row for (_, over), row in table.iterrows()}
    assert rows["every token of the verifier's held-out replies"]["share outside"] == "20%"
    assert rows["the continuations it scored, 16 held-out prompts"]["share outside"] == "19%"
    assert (rows["the replies of 1 held-out prompts"]["outside"], rows["the replies of 1 held-out prompts"]["of"]) == (
        "2", "4") and rows["the replies of 1 mt-bench prompts"]["share outside"] == "0%"
    assert rows["every token of the verifier's held-out replies"]["outside"] == ""  # 04 gives a share only
    first = rows["the first proposals rejected, 1 held-out prompts"]
    assert (first["outside"], first["of"], first["share outside"]) == ("1", "2", "50%")  # round 0 accepted first
    assert list(table.index.get_level_values("notebook")) == ["04", "06", "07", "07", "07", "07"]
    said = vocab_cap.why_this_size(read_lab(), 2048)  # the lab measured vocab-8192 losing, vocab-1024 gaining
    assert said.startswith("Try `--set draft_vocab_size=1024` instead of 2048: the recipe lab measured `vocab-1024` "
                           "+0.034 [") and "not yet tried on its frontier's" in said
    assert vocab_cap.why_this_size(read_lab(), 1024).startswith("Keep 1024")  # nothing smaller ran, larger lost


def test_a_shown_prompt_is_placed_in_its_set_so_one_example_is_not_read_as_the_set():
    from eagle3kit.evaluate.fates import beside_its_set
    from eagle3kit.evaluate.scores import PromptScore

    records = [PromptScore(str(i), "held-out", 10, a) for i, a in enumerate((9, 1, 2, 3, 4))]  # τ 1.9, 1.1 ... 1.4
    easy = beside_its_set(records, 0)
    # pooled as 06 counts its simulated τ: 1 + 19 accepted / 50 rounds = 1.380 (equal rounds: the mean too); named
    # simulated, not "06's headline" (vLLM's counters: issue 50's review)
    assert easy.startswith("this prompt's τ 1.900 against the set's 1.380 (simulated, all rounds pooled: notebook "
                           "06's simulated τ of the set; the median prompt 1.300) over 5 prompts")
    unequal = [PromptScore("0", "held-out", 10, 9), PromptScore("1", "held-out", 30, 3)]  # τ 1.9 and 1.1
    assert "against the set's 1.300 (simulated, all rounds pooled" in beside_its_set(unequal, 0)  # 12/40, not 1.5
    assert "above 4 of them, an easy one" in easy
    assert "above 0 of them, a hard one" in beside_its_set(records, 1)
    assert "near the middle" in beside_its_set(records, 3)
    assert beside_its_set([PromptScore("x", "held-out", 0, 0)], 0) == "this prompt took no round: nothing to compare"


def test_the_prompt_shown_first_is_typical_not_a_loop():
    """07 shows first the held-out prompt nearest its set's median τ whose reply does not loop (issue 50's review:
    the demo's first prompt was a looping reply, "an easy one"); with no such prompt, the nearest one all the same."""
    from eagle3kit.evaluate.fates import typical
    from eagle3kit.evaluate.scores import PromptScore

    loop = "1. The first step is to create a new instance of the class. " * 6
    prose = ["Paris is the capital of France, known for its museums.", "Water boils at 100 degrees at sea level.",
             "A haiku has three lines of five, seven and five syllables.", "Rust has no garbage collector at all."]
    records = [PromptScore(str(i), "x", 10, a) for i, a in enumerate([9, 2, 4, 5, 7])]  # τ 1.9, 1.2, 1.4, 1.5, 1.7
    assert typical(records, [loop, *prose]) == 3  # the median is 1.5; the looping reply (τ 1.9) is passed over
    assert typical(records, [prose[0], loop, loop, loop, loop]) == 0  # the one that does not loop
    assert typical(records, [loop] * 5) == 3  # all loop: the nearest the median
    # a prompt with no round is never shown first; 1.4 and 1.5 lie as near the median 1.45: the earlier one
    assert typical([PromptScore("0", "x", 0, 0), *records[1:]], [prose[0], *prose]) == 2
