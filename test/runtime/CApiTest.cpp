//===- CApiTest.cpp - The toy model through kimi_runtime.h ---------------===//

#include "kimi_runtime.h"

#include "toy_artifact.h"
#include "toy_model_config.h"

#include "runtime/artifact/writer.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <string>

namespace {

class CApi : public ::testing::Test {
protected:
  void SetUp() override {
    artifactPath_ = dir_.path() + "/toy.kimi";
    weightsPath_ = dir_.path() + "/toy.safetensors";
    ASSERT_TRUE(kimi::rt::ArtifactWriter(toy::artifact()).writeFile(artifactPath_).isOk());
    ASSERT_TRUE(toy::writeWeights(weightsPath_).isOk());
  }

  kimi_session *newSession(kimi_artifact **artifactOut = nullptr) {
    kimi_artifact *artifact = nullptr;
    EXPECT_EQ(kimi_artifact_open(artifactPath_.c_str(), &artifact), KIMI_OK)
        << kimi_last_error();
    const char *paths[] = {weightsPath_.c_str()};
    kimi_session *session = nullptr;
    EXPECT_EQ(kimi_session_create(artifact, paths, 1, &session), KIMI_OK)
        << kimi_last_error();
    if (artifactOut)
      *artifactOut = artifact;
    else
      kimi_artifact_close(artifact); // the session keeps what it needs
    return session;
  }

  static void expectLastRow(const kimi_session *s, const std::vector<int32_t> &tokens) {
    const float *logits = nullptr;
    size_t rows = 0, vocab = 0;
    ASSERT_EQ(kimi_session_logits(s, &logits, &rows, &vocab), KIMI_OK);
    ASSERT_GT(rows, 0u);
    ASSERT_EQ(vocab, static_cast<size_t>(TOY_VOCAB));
    std::vector<double> ref = toy::referenceLogits(tokens).back();
    for (size_t v = 0; v < vocab; ++v)
      EXPECT_NEAR(logits[(rows - 1) * vocab + v], ref[v], 1e-4 * (1 + std::fabs(ref[v])));
  }

  toy::TempDir dir_{"capi"};
  std::string artifactPath_, weightsPath_;
};

} // namespace

TEST_F(CApi, PrefillDecodeSaveRestoreCounters) {
  kimi_artifact *artifact = nullptr;
  kimi_session *s = newSession(&artifact);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(kimi_artifact_vocab_size(artifact), TOY_VOCAB);
  EXPECT_STREQ(kimi_artifact_model_type(artifact), "toy");
  EXPECT_STREQ(kimi_artifact_layer_kinds(artifact), "KM");
  EXPECT_NE(std::string(kimi_artifact_config_json(artifact)).find("toy"), std::string::npos);
  kimi_artifact_close(artifact);
  EXPECT_EQ(kimi_session_vocab_size(s), TOY_VOCAB);

  const float *logits = nullptr;
  size_t rows = 7;
  ASSERT_EQ(kimi_session_logits(s, &logits, &rows, nullptr), KIMI_OK);
  EXPECT_EQ(rows, 0u);

  std::vector<int32_t> prompt = {2, 7, 1, 8};
  ASSERT_EQ(kimi_session_prefill(s, prompt.data(), prompt.size()), KIMI_OK)
      << kimi_last_error();
  ASSERT_EQ(kimi_session_logits(s, &logits, &rows, nullptr), KIMI_OK);
  EXPECT_EQ(rows, 4u);
  expectLastRow(s, prompt);
  // Only the last row: one row, the same values.
  std::vector<float> lastRow(logits + 3 * TOY_VOCAB, logits + 4 * TOY_VOCAB);
  ASSERT_EQ(kimi_session_prefill_last(s, prompt.data(), prompt.size()), KIMI_OK)
      << kimi_last_error();
  ASSERT_EQ(kimi_session_logits(s, &logits, &rows, nullptr), KIMI_OK);
  EXPECT_EQ(rows, 1u);
  EXPECT_EQ(std::memcmp(logits, lastRow.data(), lastRow.size() * 4), 0);
  EXPECT_EQ(kimi_session_length(s), 4);
  EXPECT_EQ(kimi_session_prefill_last(nullptr, prompt.data(), 1),
            KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kimi_last_error()).find("kimi_session_prefill_last"),
            std::string::npos)
      << kimi_last_error();

  kimi_state *state = nullptr;
  ASSERT_EQ(kimi_session_save_state(s, &state), KIMI_OK);
  EXPECT_GT(kimi_state_bytes(state), 0);
  ASSERT_EQ(kimi_session_decode_step(s, 2), KIMI_OK) << kimi_last_error();
  ASSERT_EQ(kimi_session_decode_step(s, 8), KIMI_OK);
  expectLastRow(s, {2, 7, 1, 8, 2, 8});
  EXPECT_EQ(kimi_session_length(s), 6);

  ASSERT_EQ(kimi_session_restore_state(s, state), KIMI_OK);
  EXPECT_EQ(kimi_session_length(s), 4);
  expectLastRow(s, prompt);
  ASSERT_EQ(kimi_session_decode_step(s, 5), KIMI_OK);
  expectLastRow(s, {2, 7, 1, 8, 5});

  // The batched form: one sequence here, so one token per step.
  EXPECT_EQ(kimi_session_batch(s), 1);
  const int32_t three[] = {3, 3};
  EXPECT_EQ(kimi_session_decode(s, three, 2), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kimi_last_error()).find("decode step with 2 tokens: "
                                                "the session steps 1 sequences"),
            std::string::npos)
      << kimi_last_error();
  EXPECT_EQ(kimi_session_decode(s, nullptr, 1), KIMI_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(kimi_session_decode(s, three, 1), KIMI_OK) << kimi_last_error();
  expectLastRow(s, {2, 7, 1, 8, 5, 3});
  ASSERT_EQ(kimi_session_restore_state(s, state), KIMI_OK);

  // The state also restores into another session.
  kimi_session *other = newSession();
  ASSERT_EQ(kimi_session_restore_state(other, state), KIMI_OK);
  ASSERT_EQ(kimi_session_decode_step(other, 5), KIMI_OK);
  expectLastRow(other, {2, 7, 1, 8, 5});
  kimi_state_free(state);
  kimi_session_destroy(other);

  kimi_counters c;
  ASSERT_EQ(kimi_session_counters(s, &c), KIMI_OK);
  EXPECT_EQ(c.prefill_calls, 2); // all rows, then the last row only
  EXPECT_EQ(c.prefill_tokens, 8);
  EXPECT_EQ(c.decode_calls, 4); // 3 steps and one kimi_session_decode
  EXPECT_EQ(c.decode_tokens, 4);
  EXPECT_GT(c.peak_bytes, 0);
  EXPECT_GE(c.peak_bytes, c.current_bytes);
  EXPECT_EQ(c.weight_bytes, (2 * TOY_VOCAB * TOY_HIDDEN + TOY_HIDDEN +
                             TOY_EXPERTS * TOY_HIDDEN) * 4);
  kimi_session_destroy(s);
}

TEST_F(CApi, OpenFromBytes) {
  auto bytes = kimi::rt::ArtifactWriter(toy::artifact()).finish();
  ASSERT_TRUE(bytes.isOk());
  kimi_artifact *a = nullptr;
  ASSERT_EQ(kimi_artifact_open_bytes(bytes->data(), bytes->size(), &a), KIMI_OK);
  EXPECT_EQ(kimi_artifact_vocab_size(a), TOY_VOCAB);
  kimi_artifact_close(a);
  ASSERT_EQ(kimi_artifact_open_bytes(bytes->data(), 100, &a), KIMI_ERROR_INVALID_ARTIFACT);
  EXPECT_NE(std::string(kimi_last_error()).find("artifact truncated: 100 of"),
            std::string::npos);
}

TEST_F(CApi, ErrorsHaveCodesAndMessages) {
  kimi_artifact *a = reinterpret_cast<kimi_artifact *>(0x1);
  EXPECT_EQ(kimi_artifact_open("/nonexistent/x.kimi", &a), KIMI_ERROR_IO);
  EXPECT_EQ(a, reinterpret_cast<kimi_artifact *>(0x1)); // untouched on failure
  EXPECT_NE(std::string(kimi_last_error()).find("/nonexistent/x.kimi"), std::string::npos);
  EXPECT_STREQ(kimi_status_name(KIMI_ERROR_IO), "KIMI_ERROR_IO");

  EXPECT_EQ(kimi_artifact_open(nullptr, &a), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(kimi_last_error(), "kimi_artifact_open: path is NULL");
  EXPECT_EQ(kimi_artifact_open(weightsPath_.c_str(), &a), KIMI_ERROR_INVALID_ARTIFACT);

  ASSERT_EQ(kimi_artifact_open(artifactPath_.c_str(), &a), KIMI_OK);
  kimi_session *s = nullptr;
  const char *missing[] = {"/nonexistent/w.safetensors"};
  EXPECT_EQ(kimi_session_create(a, missing, 1, &s), KIMI_ERROR_IO);
  EXPECT_EQ(s, nullptr);
  const char *none[] = {nullptr};
  EXPECT_EQ(kimi_session_create(a, none, 1, &s), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kimi_session_create(a, nullptr, 0, &s), KIMI_ERROR_INVALID_WEIGHTS);
  EXPECT_NE(std::string(kimi_last_error()).find("weight 'model.embed_tokens.weight' not found"),
            std::string::npos);
  kimi_artifact_close(a);

  s = newSession();
  EXPECT_EQ(kimi_session_decode_step(s, 1), KIMI_ERROR_FAILED_PRECONDITION);
  int32_t bad[] = {0, 99};
  EXPECT_EQ(kimi_session_prefill(s, bad, 2), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(kimi_last_error(), "token id 99 at position 1 is outside the vocabulary [0, 16)");
  EXPECT_EQ(kimi_session_prefill(s, nullptr, 3), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kimi_session_prefill(nullptr, bad, 1), KIMI_ERROR_INVALID_ARGUMENT);
  kimi_state *st = nullptr;
  EXPECT_EQ(kimi_session_save_state(s, &st), KIMI_ERROR_FAILED_PRECONDITION);
  EXPECT_EQ(kimi_session_restore_state(s, nullptr), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kimi_session_counters(s, nullptr), KIMI_ERROR_INVALID_ARGUMENT);
  kimi_session_destroy(s);
  kimi_session_destroy(nullptr);
  kimi_artifact_close(nullptr);
  kimi_state_free(nullptr);
}

// kimi_session_create_rank: one rank's session, checked before any device or
// store is touched (a rank out of range, a partitioned artifact through the
// one-rank call, CPU ranks that need MPI).
TEST_F(CApi, SessionOfARank) {
  const char *paths[] = {weightsPath_.c_str()};
  kimi_artifact *a = nullptr;
  ASSERT_EQ(kimi_artifact_open(artifactPath_.c_str(), &a), KIMI_OK);
  EXPECT_EQ(kimi_artifact_num_ranks(a), 1);
  // Rank 0 of one rank is the plain session: the toy's logits.
  kimi_session *s = nullptr;
  ASSERT_EQ(kimi_session_create_rank(a, paths, 1, 0, nullptr, -1, &s), KIMI_OK)
      << kimi_last_error();
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5};
  ASSERT_EQ(kimi_session_prefill(s, tokens.data(), tokens.size()), KIMI_OK);
  expectLastRow(s, tokens);
  kimi_session_destroy(s);
  s = nullptr;
  EXPECT_EQ(kimi_session_create_rank(a, paths, 1, 1, nullptr, -1, &s),
            KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(kimi_last_error(), "kimi_session_create_rank: rank 1: the "
                                  "artifact is not partitioned (1 rank)");
  EXPECT_EQ(kimi_session_create_rank(a, paths, 1, -2, nullptr, -1, &s),
            KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  kimi_artifact_close(a);

  // The toy over two CPU ranks.
  kimi::rt::ArtifactSpec spec = toy::artifact();
  spec.target.numRanks = 2;
  spec.target.gridShape = {2};
  const std::string twoRanks = dir_.path() + "/toy-2.kimi";
  ASSERT_TRUE(kimi::rt::ArtifactWriter(spec).writeFile(twoRanks).isOk());
  ASSERT_EQ(kimi_artifact_open(twoRanks.c_str(), &a), KIMI_OK) << kimi_last_error();
  EXPECT_EQ(kimi_artifact_num_ranks(a), 2);
  EXPECT_EQ(kimi_session_create(a, paths, 1, &s), KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kimi_last_error())
                .find("partitioned over 2 ranks: create each rank's session "
                      "with kimi_session_create_rank"),
            std::string::npos)
      << kimi_last_error();
  EXPECT_EQ(kimi_session_create_rank(a, paths, 1, 0, "/tmp/store", -1, &s),
            KIMI_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kimi_last_error()).find("apply to GPU models"),
            std::string::npos)
      << kimi_last_error();
  EXPECT_EQ(s, nullptr);
  kimi_artifact_close(a);
  EXPECT_EQ(kimi_artifact_num_ranks(nullptr), 0);
}
