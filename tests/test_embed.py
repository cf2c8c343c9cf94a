"""The real bundled MiniLM, loaded offline: unit vectors, and batched groups equal one-by-one."""

import numpy as np

from lychee_ray.config_sections import EmbeddingConfig
from lychee_ray.embedding import Embedder


def test_bundled_model_gives_unit_vectors_and_groups_match_single_calls():
    emb = Embedder(EmbeddingConfig())
    groups = [["I adopted a puppy.", "We went hiking."], [], ["The meeting moved to Friday."]]
    batched = emb.encode_groups(groups)
    assert [g.shape for g in batched] == [(2, 384), (0, 384), (1, 384)]
    assert batched[0].dtype == np.float32
    assert np.allclose(np.linalg.norm(batched[0], axis=1), 1.0, atol=1e-5)
    single = emb.encode(["The meeting moved to Friday."])
    assert np.allclose(batched[2], single, atol=1e-5)
    # different texts differ: a slicing bug that handed the wrong rows would show here
    assert not np.allclose(batched[0][0], batched[2][0])
