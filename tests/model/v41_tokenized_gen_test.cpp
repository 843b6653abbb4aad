// The V4.1 generator with a tokenizer (gen-model --preset v41-tiny --tokenizer-json): the shape
// re-sized to the DeepSeek vocabulary keeps every V4.1 invariant (the stub Engram token map over
// the whole vocabulary, multipliers under the new bound, C1-C8), and the written file carries
// the tokenizer keys and vocabulary-sized embedding, head and Markov heads that read back into
// the same hyper-parameters.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "core/error.h"
#include "gen-model/gen_model.h"
#include "gen-model/vocab.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "support/test_support.h"

namespace magnetar {
namespace {

TEST(V41TokenizedGen, VocabularyResizeKeepsTheInvariants) {
    const hparams base = preset_v41_tiny();
    const hparams hp = genmodel::v41_with_vocab(base, genmodel::kDeepSeekV4VocabSize);
    EXPECT_NO_THROW(hp.validate());
    EXPECT_EQ(hp.n_vocab, 129280u);
    const engram_hparams& e = hp.v41.engram;
    ASSERT_EQ(e.token_map.size(), 129280u);
    std::set<int32_t> ids(e.token_map.begin(), e.token_map.end());
    EXPECT_EQ(ids.size(), e.compressed_vocab);
    EXPECT_EQ(e.compressed_vocab, 64640u);
    EXPECT_EQ(*ids.begin(), 0);
    EXPECT_EQ(*ids.rbegin(), 64639);
    EXPECT_EQ(e.pad_id, static_cast<uint32_t>(e.token_map[2]));
    EXPECT_EQ(e.pad_id, 1u);
    // The stub of the 512-id preset is the prefix of the resized map.
    for (size_t t = 0; t < base.v41.engram.token_map.size(); ++t) {
        ASSERT_EQ(e.token_map[t], base.v41.engram.token_map[t]) << t;
    }
    const uint64_t bound = e.multiplier_bound();
    ASSERT_EQ(e.multipliers.size(), base.v41.engram.multipliers.size());
    for (size_t i = 0; i < e.multipliers.size(); ++i) {
        EXPECT_EQ(e.multipliers[i] % 2, 1u) << i;
        EXPECT_LT(e.multipliers[i] >> 1, bound) << i;
        EXPECT_EQ(e.multipliers[i] >> 1, (base.v41.engram.multipliers[i] >> 1) % bound) << i;
    }
    // Table rows follow engram.vocab_size, not the vocabulary.
    EXPECT_EQ(e.num_embeddings, base.v41.engram.num_embeddings);
    EXPECT_EQ(e.primes, base.v41.engram.primes);
    EXPECT_EQ(hp.v41.dspark.noise_token_id, 128799u);
    // Too small a vocabulary is refused, V4 shapes too.
    EXPECT_THROW(genmodel::v41_with_vocab(base, 2), Error);
    EXPECT_THROW(genmodel::v41_with_vocab(preset_tiny(), 129280), Error);
}

TEST(V41TokenizedGen, FileCarriesTheTokenizerAndVocabularySizedTensors) {
    const std::string json = genmodel::find_tokenizer_json();
    if (json.empty()) GTEST_SKIP() << "tokenizer.json missing (scripts/setup.sh)";
    const std::string path = test::temp_dir() + "/v41-tok.gguf";
    genmodel::options o;
    o.preset = "v41-tiny";
    o.weights = genmodel::weight_scheme::preset_default;
    o.output = path;
    o.tokenizer_json = json;
    o.quiet = true;
    genmodel::generate(o);

    const auto r = gguf::reader::open(path);
    const hparams got = read_hparams(*r);
    const hparams want = genmodel::v41_with_vocab(preset_v41_tiny(), 129280);
    EXPECT_EQ(got.n_vocab, 129280u);
    EXPECT_EQ(got.v41.engram.token_map, want.v41.engram.token_map);
    EXPECT_EQ(got.v41.engram.compressed_vocab, want.v41.engram.compressed_vocab);
    EXPECT_EQ(got.v41.engram.multipliers, want.v41.engram.multipliers);
    EXPECT_EQ(got.v41.engram.pad_id, 1u);
    EXPECT_EQ(got.v41.dspark.noise_token_id, 128799u);
    const gguf::value* tokens = r->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->arr.size(), 129280u);
    ASSERT_NE(r->find("tokenizer.ggml.merges"), nullptr);
    for (const char* name :
         {"token_embd.weight", "output.weight", "blk.9.dspark_markov_embd.weight",
          "blk.9.dspark_markov_head.weight"}) {
        const gguf::tensor_info* t = r->find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(t->ne[1], 129280) << name;
        EXPECT_EQ(t->type, ggml_type::BF16) << name;  // lossless profile
    }
    EXPECT_LT(r->file_size(), 200ull << 20);

    // A missing tokenizer.json fails cleanly without leaving a file.
    o.tokenizer_json = test::temp_dir() + "/missing.json";
    o.output = test::temp_dir() + "/never.gguf";
    EXPECT_THROW(genmodel::generate(o), Error);
    EXPECT_FALSE(std::ifstream(o.output).good());
}

}  // namespace
}  // namespace magnetar
