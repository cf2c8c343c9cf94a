"""Stage 1, read: turn conversation archives into `Conversation` objects, one per conversation.

Sources (detected from the content, not the file name: `files._detect_object`), one module each:
- `chatgpt`: a ChatGPT data export (`conversations.json`: a list of {title, mapping: {node_id:
  {message, parent, children}}, current_node, conversation_id|id}); the branch ending at
  current_node is read, message create_time (epoch) is the turn's UTC time;
- `locomo`: LoCoMo JSON (a list of {sample_id, conversation: {speaker_a, session_<N>, ...}, qa});
- `longmemeval`: LongMemEval JSON (a list of {question_id, haystack_sessions, haystack_dates, ...});
- `chat`: generic chat JSONL/JSON ({conversation_id, turns|messages: [{role|speaker,
  content|text, timestamp?}]}), which covers OpenAI chat / fine-tuning JSONL ({messages: [{role,
  content: text or a list of parts}]});
- `sharegpt`: ShareGPT JSON/JSONL ({id, conversations: [{from: human|gpt|system|..., value}]});
- `turns`: turn-level JSONL or Parquet (one turn per row with a conversation_id); the job groups
  the rows of a conversation from every file of the input (`turns.group_conversation`);
- `beam`: BEAM, a conversation per folder (chat.json or chat_trunecated.json beside
  probing_questions/probing_questions.json), found by `beam.beam_folders` in the listing and
  read as one part of its own (`plan.FilePart.folder`), its files never one by one.
Every reader takes (object, `common.Source`, config); BEAM's object is the folder's parsed
files. A conversation the source gives no id gets `common.anon_id`: a hash of the file's path
relative to the input root, the line or item, and the object's content, so the same file read
twice agrees and two folders never collide. System prompts, tool traffic and (ChatGPT) other
branches are no turns: each one skipped is an errors row naming it (`skipped_system`,
`skipped_tool`, `skipped_no_text`, `off_branch`; `bad_text` for text that is a number or an
object), so a source's turns add up to stored turns + skipped rows.
`listing` lists the input (every file under a folder or URI, except a lychee-ray store inside it
and the run's output; a BEAM folder as one entry); `files` dispatches each object of a file to
its reader; `plan` cuts a large JSONL file into byte ranges at line boundaries, each read by a
task of its own; `decode` turns a file's bytes into parseable text by content (gzip/zstd,
Parquet magic, lenient UTF-8, JSON of any depth); `common` holds what all readers share. Each
reader groups its turns into exchanges (`lychee_ray.io.exchanges`).

Bad input never stops the read. Every problem becomes an entry in `Conversation.errors`
(file, line, field, message), which ends up in the `errors` table; a problem that has no
conversation of its own (a broken JSONL line, a file that is not JSON) becomes a conversation
row with status `error` so it is visible in `conversations` too. Its id hashes the file's path
relative to the input root (`read_file(..., root=)`), the line and the kind, so reruns agree.
"""
