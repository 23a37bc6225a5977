"""Prompts and answers from a dataset the user has: reading it, planning with it, sending it.

Input: the committed slice of the ShareGPT conversations (tests/data/sharegpt: the JSON list,
the same as JSONL of prompts, and a folder of text files) and bad files written here. Output
checked: the items of each format, the diagnostics for a file that is missing, empty,
malformed or too short for the plan (exit 2, nothing sent), the salted order (each item once,
the same for the same salt), answers paired with prompts, `filler N from` sized to N tokens by
the engine's tokenizer, and the bytes an engine receives.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from runexec import execute
from workloadlang import api, dataset
from workloadlang.diagnostics import WorkloadError

DATA = Path(__file__).parents[1] / "data" / "sharegpt"
JSON = DATA / "sharegpt_24.json"
RAW = json.loads(JSON.read_text())


def first_pairs() -> list[tuple[str, str | None]]:
    out = []
    for c in RAW:
        turns = c["conversations"]
        k = next(k for k, t in enumerate(turns) if t["from"] == "human" and t["value"].strip())
        after = turns[k + 1] if k + 1 < len(turns) else None
        out.append((turns[k]["value"], after["value"] if after and after["from"] == "gpt"
                    else None))
    return out


# ---------------------------------------------------------------- reading


def test_a_sharegpt_list_gives_each_conversations_first_prompt_and_answer():
    d = dataset.load(JSON)
    assert d.format == "sharegpt" and len(d.items) == 24 and not d.notes
    assert [(i.prompt, i.answer) for i in d.items] == first_pairs()
    assert d.items[0].prompt.startswith("Summarize the main ideas of Jeff Walker")


def test_jsonl_of_prompts_and_a_folder_of_texts_read_too():
    lines = dataset.load(DATA / "prompts.jsonl")
    assert lines.format == "jsonl"
    assert [(i.prompt, i.answer) for i in lines.items] == first_pairs()
    folder = dataset.load(DATA / "texts")
    files = sorted((DATA / "texts").glob("*.txt"))
    assert folder.format == "folder" and len(folder.items) == len(files) == 6
    assert [i.prompt for i in folder.items] == [f.read_text() for f in files]
    assert all(i.answer is None for i in folder.items)


def test_a_list_is_read_element_by_element_across_chunk_ends(monkeypatch):
    monkeypatch.setattr(dataset, "_CHUNK", 7)  # every element and character cut somewhere
    d = dataset.load(JSON)
    assert [(i.prompt, i.answer) for i in d.items] == first_pairs()


def test_reading_stops_at_the_text_it_may_keep(tmp_path: Path):
    d = dataset.load(JSON, max_text=10_000)
    assert 0 < len(d.items) < 24 and "characters of text are kept" in d.notes[0]


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"   \n", "empty"),
    (b"[", "not closed"),
    (b"[{\"conversations\": []}]", "holds no prompt"),
    (b"[1, 2]", "not an object"),
    (b"[{\"id\": 1}]", "no `conversations`"),
    (b"[{\"conversations\": [{\"from\": \"human\", \"value\": 3}]}]", "not a string"),
    (b"[{\"conversations\": [}]", "not JSON"),
    (b"{\"prompt\": \"a\"}\n{\"prompt\": \"b\"", "not JSON"),
    (b"{\"question\": \"a\"}\n[1]\n", "not a string or an object"),
    (b"{\"title\": \"a\"}\n", "no prompt"),
    (b"\"caf\xe9\"\n", "not UTF-8"),
    (b"[\"caf\xe9\"]", "not UTF-8"),
])
def test_a_malformed_file_is_refused_with_what_is_wrong(tmp_path: Path, content: bytes,
                                                        message: str):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(dataset.DatasetError) as e:
        dataset.load(path)
    assert message in e.value.message


def test_a_missing_file_and_an_empty_folder_are_refused(tmp_path: Path):
    with pytest.raises(dataset.DatasetError, match="cannot read"):
        dataset.load(tmp_path / "nope.json")
    with pytest.raises(dataset.DatasetError, match="no .txt or .md file"):
        dataset.load(tmp_path)


# ---------------------------------------------------------------- planning


CHATS = """workload chats {
  params { data: string = "%s"; users: int = 4; fill: tokens = 200 }
  dataset chats = $data
  session user repeat $users {
    user prompt chats
    assistant answer chats
    user filler $fill from chats, "\\n\\nAnd this?"
    reply 16
  }
  session fixed { user prompt chats[3]; reply 8 }
}
""" % JSON


def plan(text: str = CHATS, salt: str = "d", **params: str):
    source = api.Source(name="chats.wl", text=text)
    return api.make_plan(api.parse_checked(source), source, params, salt=salt)


def user_texts(p, session: str) -> list[str]:
    req = next(r for r in p.requests if r.session == session)
    msgs = [p.messages[i] for i in p.message_ids(req)]
    return ["".join(p.text_of(s) if s.kind == "text" else s.text for s in m.segs) for m in msgs]


def test_prompts_are_taken_in_a_salted_order_each_once_and_answers_follow_them():
    p = plan()
    pairs = dict(first_pairs())
    prompts = [user_texts(p, f"user#{k}")[0] for k in range(4)]
    assert len(set(prompts)) == 4 and all(t in pairs for t in prompts)
    for k, prompt in enumerate(prompts):
        assert user_texts(p, f"user#{k}")[1] == pairs[prompt]  # its recorded answer
    assert user_texts(p, "fixed#0")[0] == first_pairs()[3][0]
    again, other = plan(), plan(salt="e")
    assert [user_texts(again, f"user#{k}")[0] for k in range(4)] == prompts
    assert [user_texts(other, f"user#{k}")[0] for k in range(4)] != prompts
    info = p.datasets[0]
    assert (info.name, info.format, info.items) == ("chats", "sharegpt", 24)
    assert info.taken > 4 and info.filler_words == 4 * 200


def test_a_filler_from_a_dataset_carries_its_words():
    p = plan()
    segs = [s for m in p.messages for s in m.segs if s.kind == "filler"]
    assert len(segs) == 4 and all(s.tokens == 200 and len(s.text.split()) == 200 for s in segs)
    items = dataset.load(JSON).items
    words = [(i.prompt.split() + (i.answer or "").split())[:8] for i in items]
    assert all(s.text.split()[:8] in words for s in segs)  # each filler starts with an item
    assert len({s.text for s in segs}) == 4  # no two take the same items


@pytest.mark.parametrize("params", [{"users": "30"}, {"fill": "3000"}])
def test_a_dataset_too_short_for_the_plan_is_an_error(params: dict):
    with pytest.raises(WorkloadError) as e:
        plan(**params)
    d = e.value.diagnostics[0]
    words = dataset.load(JSON).words
    assert d.code == "WL421" and "too short for the plan" in d.message
    assert f"24 item(s) ({words:,} words)" in d.message


def test_an_index_past_the_end_and_an_answer_without_a_prompt_are_errors():
    with pytest.raises(WorkloadError, match="there is no item 99"):
        plan(CHATS.replace("chats[3]", "chats[99]"))
    text = f'workload w {{ dataset d = "{JSON}"\n session s {{ user answer d; reply 1 }} }}'
    with pytest.raises(WorkloadError, match="follows no `prompt d`"):
        plan(text)


def test_an_unknown_dataset_is_a_check_error():
    source = api.Source(name="t.wl", text=f'workload w {{ dataset chats = "{JSON}"\n'
                        ' session s { user prompt chat; reply 1 } }')
    with pytest.raises(WorkloadError) as e:
        api.parse_checked(source)
    d = e.value.diagnostics[0]
    assert d.code == "WL251" and "chats" in (d.hint or "")


@pytest.mark.parametrize("content, code", [
    (None, "WL420"), (b"", "WL420"), (b"[{\"conversations\": [", "WL420"),
    (b"{\"x\": 1}\n", "WL420"), (b"\"only one prompt\"\n", "WL421"),
])
def test_wl_run_refuses_a_bad_dataset_before_sending_anything(tmp_path: Path, content, code):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_bytes(content)
    wl = tmp_path / "w.wl"
    wl.write_text(CHATS.replace(str(JSON), str(path)))
    records = tmp_path / "records.jsonl"
    proc = subprocess.run([sys.executable, "-m", "workloadlang.cli", "run", str(wl), "--sim",
                           "--no-viz", "--records", str(records)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"error[{code}]" in proc.stderr and "Traceback" not in proc.stderr
    assert code == "WL421" or str(path) in proc.stderr
    sent = [line for line in (records.read_text().splitlines() if records.exists() else [])
            if '"type":"request"' in line.replace(" ", "")]
    assert sent == []


# ---------------------------------------------------------------- sending


def test_the_engine_receives_the_datasets_text_and_a_filler_of_its_size():
    p = plan(users="2")
    seen: dict[str, dict] = {}

    def chat(request: httpx.Request) -> httpx.Response:
        seen[request.headers["x-wl-request"]] = json.loads(request.content)
        body = (b'data: {"choices":[{"delta":{"content":"ok"}}]}\n\n'
                b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}\n\n'
                b"data: [DONE]\n\n")
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    run, _ = execute(p, chat, ahead=False)
    assert all(r.error is None for r in run.records)
    req = next(r for r in p.requests if r.session == "user#0")
    sent = seen[req.id]["messages"]
    planned = user_texts(p, "user#0")
    assert sent[0]["content"] == planned[0] and sent[1]["content"] == planned[1]
    filler = sent[2]["content"].removesuffix("\n\nAnd this?")
    assert len(filler.split()) == 200  # the tokenizer (a word a token) sized it
    assert filler.split() == planned[2].removesuffix("\n\nAnd this?").split()


def test_the_dry_run_names_each_dataset_and_what_the_plan_took():
    from workloadlang.plan.dryrun import header_lines

    p = plan()
    line = next(x for x in header_lines(p) if x.startswith("dataset chats:"))
    d = p.datasets[0]
    assert f"(sharegpt, 24 items, {d.taken} taken, 800 words of filler" in line
    assert d.sha256[:16] in line


def test_the_plan_hash_holds_the_datasets_content_not_its_path(tmp_path: Path):
    copy = tmp_path / "copy.json"
    copy.write_bytes(JSON.read_bytes())
    assert plan(data=str(copy)).plan_hash == plan().plan_hash
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(RAW[1:] + RAW[:1]))
    assert plan(data=str(changed)).plan_hash != plan().plan_hash
