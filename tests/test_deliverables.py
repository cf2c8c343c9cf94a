"""What the rules backend keeps of an assistant's reply (rules/deliverables.py): its concrete
blocks (names, numbers, commands, versions, code), at most a few per reply, never its advice."""

from __future__ import annotations

from lychee_ray.rules.deliverables import MAX_ASSISTANT_RECORDS, blocks, concreteness, condensed, deliverables

REPLY = """Good question! Caching is a broad topic and it helps to think about it carefully.

Here is what I would do:

1. Set `maxmemory` to 256mb in redis.conf.
2. Use the allkeys-lru eviction policy.
3. Keep an eye on things.

```bash
# restart after the change
sudo systemctl restart redis-server
redis-cli CONFIG GET maxmemory
```

Always test your changes before you deploy them. Good luck!"""


def test_blocks_keep_code_fences_whole_and_split_lists_and_paragraphs():
    got = blocks(REPLY)
    code = [b for b in got if b.kind == "code"]
    assert len(code) == 1 and code[0].lang == "bash" and code[0].text(REPLY).count("\n") == 4
    assert "1. Set `maxmemory` to 256mb in redis.conf." in [b.text(REPLY) for b in got if b.kind == "item"]


def test_only_concrete_blocks_become_records_in_reply_order():
    got = deliverables(REPLY)
    assert got[0] == "Set `maxmemory` to 256mb in redis.conf."
    assert got[-1].startswith("code (bash): sudo systemctl restart redis-server; redis-cli CONFIG GET maxmemory")
    assert not any("Good question" in t or "Always test" in t or "Keep an eye" in t for t in got)


def test_advice_alone_makes_no_record_and_long_replies_are_capped():
    assert deliverables("Great idea! Remember to keep things simple and test often. Happy to help.") == []
    long = "\n\n".join(f"Step {i}: run `tool --level {i}` on host{i}.example.org" for i in range(20))
    got = deliverables(long)
    assert len(got) == MAX_ASSISTANT_RECORDS and got == sorted(got, key=long.index)


def test_condensed_prose_keeps_its_concrete_sentences_and_is_bounded():
    message = "We talked a lot. The pool size is 32 connections. That is all. " + "word " * 200 + "version 3.11.2 here."
    text = condensed(message, blocks(message)[0])
    assert text.startswith("The pool size is 32 connections.") and "We talked" not in text and len(text) <= 405
    assert concreteness("nothing here at all") == 0 and concreteness("port 8080 and `pip install x==1.2.3`") >= 3
