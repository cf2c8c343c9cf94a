"""Stage 1, read: turn conversation archives into `Conversation` objects, one per conversation.

Sources (detected from the content, not the file name), one module each:
- `locomo`: LoCoMo JSON (a list of {sample_id, conversation: {speaker_a, session_<N>, ...}, qa});
- `longmemeval`: LongMemEval JSON (a list of {question_id, haystack_sessions, haystack_dates, ...});
- `chat`: generic chat JSONL/JSON ({conversation_id, turns: [{role|speaker, content|text,
  timestamp?}]});
- `turns`: turn-level JSONL or Parquet (one turn per row with a conversation_id), grouped per file.
`files` lists the input files (every file under a folder, except a lychee-ray store inside it)
and dispatches each object of a file to its reader; `decode` turns a file's bytes into parseable
text by content (gzip/zstd, Parquet magic, lenient UTF-8, JSON of any depth); `common` holds what
all readers share. Each reader groups its turns into exchanges
(`lychee_ray.io.exchanges`).

Bad input never stops the read. Every problem becomes an entry in `Conversation.errors`
(file, line, field, message), which ends up in the `errors` table; a problem that has no
conversation of its own (a broken JSONL line, a file that is not JSON) becomes a conversation
row with status `error` so it is visible in `conversations` too. Its id hashes the file's path
relative to the input root (`read_file(..., root=)`), the line and the kind, so reruns agree.
"""
