// The memory plan: budget arithmetic, context from what is left, refusal below a useful
// context, and the --max-memory size parser (outside input).
#include <gtest/gtest.h>

#include "engine/constraint_cache.h"
#include "engine/image_feature_cache.h"
#include "engine/memory_plan.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "model_fixture.h"

namespace splash::engine {
namespace {

constexpr size_t MiB = size_t{1} << 20;

MemoryNeeds small_model() {
  MemoryNeeds needs;
  needs.weight_bytes = 100 * MiB;
  needs.mapped_bytes = 20 * MiB;
  needs.activation_bytes = 10 * MiB;
  needs.kv_bytes_per_block = 195840;  // SmolLM2-135M, 8-bit: 30 layers x 3 kv heads x 2176 bytes
  needs.native_context = 8192;
  return needs;
}

TEST(MemoryPlan, LargeBudgetGivesTheNativeContext) {
  const auto plan = plan_memory(small_model(), size_t{8} << 30, 0);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.max_context, 8192);
  // The pool stops at kMaxFullContexts full-context sequences.
  EXPECT_EQ(plan.kv_blocks, 512 * static_cast<int>(kMaxFullContexts));
  EXPECT_EQ(plan.kv_bytes, size_t{512} * kMaxFullContexts * 195840);
  EXPECT_EQ(plan.max_sequences, static_cast<int>(kMaxFullContexts));
  EXPECT_LE(plan.total_bytes(), plan.budget_bytes);
  EXPECT_NE(plan.table().find("KV cache"), std::string::npos);
}

TEST(MemoryPlan, RequestedContextIsHonouredAndCapped) {
  EXPECT_EQ(plan_memory(small_model(), size_t{8} << 30, 4000).max_context, 4000 / 16 * 16);
  // Above the trained window when asked (the summary warns), as far as memory allows.
  EXPECT_EQ(plan_memory(small_model(), size_t{8} << 30, 100000).max_context, 100000 / 16 * 16);
}

TEST(MemoryPlan, TightBudgetShrinksTheContext) {
  const auto needs = small_model();
  const size_t fixed = needs.weight_bytes + needs.mapped_bytes + needs.activation_bytes + 128 * MiB + kConstraintCacheBytes;
  const auto plan = plan_memory(needs, fixed + 3000 * needs.kv_bytes_per_block / 16, 0);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.max_context, 3000 / 16 * 16);
  EXPECT_EQ(plan.kv_blocks, 3000 / 16);
  EXPECT_EQ(plan.max_sequences, 1);
  EXPECT_LE(plan.total_bytes(), plan.budget_bytes);
}

TEST(MemoryPlan, CachesAreSetAsideAndListed) {
  auto caches = engine_caches(/*vision=*/true);
  caches.push_back({"request bodies", 64 * MiB, "bodies being read at once"});
  const auto plan = plan_memory(small_model(), size_t{8} << 30, 0, std::nullopt, caches);
  EXPECT_EQ(plan.cache_bytes(), kConstraintCacheBytes + ImageFeatureCache::kDefaultBytes + 64 * MiB);
  EXPECT_EQ(plan.total_bytes(), plan.weight_bytes + plan.mapped_bytes + plan.activation_bytes + plan.runtime_bytes +
                                    plan.cache_bytes() + plan.kv_bytes);
  for (const char* row : {"compiled grammars", "image features", "request bodies"})
    EXPECT_NE(plan.table().find(row), std::string::npos) << row;
  // A smaller pool for them than without them, at a budget that limits the pool.
  const auto needs = small_model();
  const size_t budget = needs.weight_bytes + needs.mapped_bytes + needs.activation_bytes + 1024 * MiB;
  EXPECT_LT(plan_memory(needs, budget, 0, std::nullopt, caches).kv_blocks, plan_memory(needs, budget, 0, std::nullopt, {}).kv_blocks);
  // On a GPU they are host memory: listed, not taken from the device's budget.
  const auto gpu = plan_memory(small_model(), std::nullopt, 0, GpuMemory{"H200", size_t{100} << 30, size_t{140} << 30}, caches);
  EXPECT_EQ(gpu.cache_bytes(), 0u);
  EXPECT_NE(gpu.table().find("beside the plan"), std::string::npos);
}

TEST(MemoryPlan, BelowAUsefulContextDoesNotFit) {
  const auto plan = plan_memory(small_model(), 200 * MiB, 0);
  EXPECT_FALSE(plan.fits);
  EXPECT_FALSE(plan.problem.empty());
  EXPECT_NE(plan.table().find("DOES NOT FIT"), std::string::npos);
  EXPECT_FALSE(plan_memory(small_model(), 1, 0).fits);
}

TEST(MemoryPlan, DefaultBudgetLeavesAReserve) {
  const auto plan = plan_memory(small_model(), std::nullopt, 0);
  EXPECT_LT(plan.budget_bytes, available_memory_bytes());
  EXPECT_NE(plan.budget_source.find("available"), std::string::npos);
}

// A hybrid model's recurrent states are set aside before the KV pool: one per sequence a
// server runs (kServerStateSlots) while the budget allows, at most half of what is left
// after the model, at least one; a command that runs one sequence sets aside one.
TEST(MemoryPlan, RecurrentStatesAreSetAsideBeforeTheKvPool) {
  MemoryNeeds needs = small_model();
  needs.recurrent_state_bytes = 60 * MiB;
  const auto roomy = plan_memory(needs, size_t{8} << 30, 0);
  EXPECT_EQ(roomy.state_slots, kServerStateSlots);
  EXPECT_EQ(roomy.state_bytes, kServerStateSlots * 60 * MiB);
  EXPECT_LE(roomy.total_bytes(), roomy.budget_bytes);
  EXPECT_NE(roomy.table().find("recurrent states"), std::string::npos) << roomy.table();
  // Snapshots for prefix hits: two a sequence at most (16 GiB), fewer when a quarter of what
  // one full context's KV leaves is short of them (8 GiB), and never at the context's cost.
  EXPECT_GT(roomy.state_snapshots, kServerStateSlots);
  EXPECT_LT(roomy.state_snapshots, 2 * kServerStateSlots);
  EXPECT_EQ(roomy.snapshot_bytes, roomy.state_snapshots * 60 * MiB);
  EXPECT_NE(roomy.table().find("state snapshots"), std::string::npos) << roomy.table();
  EXPECT_EQ(plan_memory(needs, size_t{16} << 30, 0).state_snapshots, 2 * kServerStateSlots);
  // 1 GiB: ~760 MiB left after the model, runtime and caches: 6 states (half of it), the rest KV.
  const auto tight = plan_memory(needs, size_t{1} << 30, 0);
  const size_t fixed = tight.total_bytes() - tight.state_bytes - tight.snapshot_bytes - tight.kv_bytes;
  EXPECT_EQ(tight.state_slots, static_cast<int>((tight.budget_bytes - fixed) / 2 / (60 * MiB)));
  EXPECT_GT(tight.state_slots, 1);
  EXPECT_LT(tight.state_slots, kServerStateSlots);
  // Snapshots only from what a full context leaves: never a shorter context for them.
  EXPECT_TRUE(tight.state_snapshots == 0 || tight.max_context == needs.native_context) << tight.table();
  EXPECT_TRUE(roomy.max_context == needs.native_context) << roomy.table();
  EXPECT_LE(tight.total_bytes(), tight.budget_bytes);
  // One sequence: one state, and more context than the server's plan leaves.
  const auto single = plan_memory(needs, size_t{1} << 30, 0, std::nullopt, engine_caches(false), 1);
  EXPECT_EQ(single.state_slots, 1);
  EXPECT_EQ(single.state_bytes, 60 * MiB);
  // Each state's room to take refused guesses back out counts with it (Model::rewind_state).
  MemoryNeeds drafting = needs;
  drafting.draft_rewind_bytes = 70 * MiB;
  const auto rewinding = plan_memory(drafting, size_t{8} << 30, 0);
  EXPECT_EQ(rewinding.state_bytes, rewinding.state_slots * 130 * MiB);
  EXPECT_EQ(rewinding.snapshot_bytes, rewinding.state_snapshots * 60 * MiB);  // (snapshots are states alone)
  EXPECT_EQ(single.state_snapshots, 0);
  EXPECT_GT(single.kv_blocks, tight.kv_blocks);
  // Too little for a useful context beside one state: refused, the state named.
  const size_t model_bytes = roomy.total_bytes() - roomy.state_bytes - roomy.snapshot_bytes - roomy.kv_bytes;
  const auto none = plan_memory(needs, model_bytes + 70 * MiB, 0, std::nullopt, engine_caches(false), 1);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(none.state_snapshots, 0);
  EXPECT_NE(none.problem.find("recurrent state"), std::string::npos) << none.problem;
}

// --snapshot-memory: as many snapshots as the bytes hold, past the plan's own share (two a
// sequence) when asked, none at 0, none for a one-sequence command; more than the budget
// leaves a KV cache refused, the snapshots named.
TEST(MemoryPlan, SnapshotMemoryAskedForIsWhatTheSnapshotsGet) {
  MemoryNeeds needs = small_model();
  needs.recurrent_state_bytes = 60 * MiB;
  const auto caches = engine_caches(false);
  const auto asked = plan_memory(needs, size_t{16} << 30, 0, std::nullopt, caches, kServerStateSlots, size_t{4} << 30);
  EXPECT_EQ(asked.state_snapshots, static_cast<int>((size_t{4} << 30) / (60 * MiB)));  // 68, past 2 x 16
  EXPECT_GT(asked.state_snapshots, 2 * kServerStateSlots);
  EXPECT_EQ(asked.snapshot_bytes, asked.state_snapshots * 60 * MiB);
  EXPECT_TRUE(asked.fits) << asked.table();
  EXPECT_LE(asked.total_bytes(), asked.budget_bytes);
  EXPECT_LT(asked.kv_blocks, plan_memory(needs, size_t{16} << 30, 0).kv_blocks + 1);
  const auto off = plan_memory(needs, size_t{16} << 30, 0, std::nullopt, caches, kServerStateSlots, size_t{0});
  EXPECT_EQ(off.state_snapshots, 0);
  EXPECT_EQ(off.snapshot_bytes, 0u);
  EXPECT_EQ(off.table().find("state snapshots"), std::string::npos) << off.table();
  EXPECT_EQ(plan_memory(needs, size_t{16} << 30, 0, std::nullopt, caches, 1, size_t{4} << 30).state_snapshots, 0);
  const auto crowded = plan_memory(needs, size_t{2} << 30, 0, std::nullopt, caches, kServerStateSlots, size_t{2} << 30);
  EXPECT_FALSE(crowded.fits) << crowded.table();
  EXPECT_NE(crowded.problem.find("--snapshot-memory"), std::string::npos) << crowded.problem;
}

TEST(MemoryPlan, ParsesSizes) {
  EXPECT_EQ(parse_memory_size("1024"), 1024u);
  EXPECT_EQ(parse_memory_size("512M"), 512 * MiB);
  EXPECT_EQ(parse_memory_size("512MiB"), 512 * MiB);
  EXPECT_EQ(parse_memory_size("8G"), size_t{8} << 30);
  EXPECT_EQ(parse_memory_size("1.5g"), size_t{3} << 29);
  EXPECT_EQ(parse_memory_size("2 GB"), size_t{2} << 30);
  for (const char* bad : {"", "lots", "-1G", "0", "8X", "8G extra", "nan", "inf", "1e30G", "G"})
    EXPECT_FALSE(parse_memory_size(bad).has_value()) << bad;
}

TEST(MemoryPlan, EstimateOfTheDefaultModel) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  auto file = gguf::File::open(path);
  const auto needs = model::estimate_memory(file);
  EXPECT_EQ(needs.native_context, 8192);
  // Per block of 16 positions, 30 layers x 3 kv heads: keys and values of 64 dims, 8-bit
  // with a float scale per position, or 16-bit.
  EXPECT_EQ(needs.kv_bytes_per_block, size_t{30} * 3 * 2 * (64 * 16 + 16 * 4));
  EXPECT_EQ(model::estimate_memory(file, model::KvType::F16).kv_bytes_per_block, size_t{30} * 3 * 2 * 64 * 16 * 2);
  EXPECT_GT(needs.weight_bytes, 60 * MiB);   // 30 layers of Q4_1 + the Q8_0 output head
  EXPECT_LT(needs.weight_bytes, 140 * MiB);
  EXPECT_EQ(needs.mapped_bytes, file.tensor("token_embd.weight").n_bytes);
}

}  // namespace
}  // namespace splash::engine
