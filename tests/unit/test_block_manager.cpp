// The paged cache's bookkeeping without a model: prefix sharing by reference, copy-on-write
// of a partly matching block, publication rules, least-recently-used eviction, and the
// accounting returning to zero.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

#include "cache/block_manager.h"
#include "cache/state_slots.h"
#include "cache/state_snapshots.h"
#include "common/error.h"

namespace splash::cache {
namespace {

struct Copy {
  int from, to, tokens;
};

class BlockManagerTest : public ::testing::Test {
 protected:
  std::vector<Copy> copies;
  BlockManager make(int blocks) {
    return BlockManager(blocks, [this](int from, int to, int tokens) { copies.push_back({from, to, tokens}); });
  }
  static std::vector<int32_t> tokens(int n, int seed = 0) {
    std::vector<int32_t> t(n);
    std::iota(t.begin(), t.end(), 1000 * seed);
    return t;
  }
  // A sequence that computed `t` on freshly allocated blocks, published as it filled them.
  static std::vector<int32_t> compute(BlockManager& m, const std::vector<int32_t>& t) {
    std::vector<int32_t> blocks;
    PrefixKey key = kEmptyPrefix;
    for (size_t start = 0; start < t.size(); start += kBlockTokens) {
      const int b = m.allocate();
      EXPECT_GE(b, 0);
      blocks.push_back(b);
      if (start + kBlockTokens <= t.size()) {
        const auto block_tokens = std::span(t).subspan(start, kBlockTokens);
        m.publish(b, key, static_cast<int>(start / kBlockTokens), block_tokens);
        key = extend_prefix(key, block_tokens);
      }
    }
    return blocks;
  }
};

TEST_F(BlockManagerTest, SiblingsShareFullBlocksByReference) {
  auto m = make(16);
  const auto t = tokens(40);
  const auto first = compute(m, t);  // 3 blocks: two full, one with 8 positions
  // A sibling with the same 40-token prefix and more: shares the two full blocks while the
  // first still runs (the partly filled third is not published until its owner ends).
  auto longer = t;
  longer.push_back(7);
  const auto match = m.acquire_prefix(longer, static_cast<int>(longer.size()) - 1);
  EXPECT_EQ(match.tokens, 32);
  ASSERT_EQ(match.blocks.size(), 2u);
  EXPECT_EQ(match.blocks[0], first[0]);
  EXPECT_EQ(match.blocks[1], first[1]);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.counters().in_use, 3);
  m.release(first, t, true);
  m.release(match.blocks, std::span(longer).first(32), true);
  const auto c = m.counters();
  EXPECT_EQ(c.in_use, 0);
  EXPECT_EQ(c.cached, 3);  // the first's partial tail is published at release
  EXPECT_EQ(c.free, 13);
}

TEST_F(BlockManagerTest, ExactReplayCopiesThePartialBlockAndLeavesTheLastToken) {
  auto m = make(16);
  const auto t = tokens(40);
  m.release(compute(m, t), t, true);
  const auto replay = m.acquire_prefix(t, static_cast<int>(t.size()) - 1);
  EXPECT_EQ(replay.tokens, 39);  // everything but the last token
  ASSERT_EQ(replay.blocks.size(), 3u);
  ASSERT_EQ(copies.size(), 1u);  // copy-on-write of the 7 matching positions of block 3
  EXPECT_EQ(copies[0].tokens, 7);
  EXPECT_EQ(copies[0].to, replay.blocks[2]);
  EXPECT_NE(copies[0].from, replay.blocks[2]);
  m.release(replay.blocks, std::span(t).first(39), true);
  EXPECT_EQ(m.counters().in_use, 0);
}

TEST_F(BlockManagerTest, ReplayEndingOnABlockBoundaryCopiesTheLastBlock) {
  auto m = make(8);
  const auto t = tokens(32);
  m.release(compute(m, t), t, true);
  const auto replay = m.acquire_prefix(t, 31);
  EXPECT_EQ(replay.tokens, 31);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].tokens, 15);
  m.release(replay.blocks, std::span(t).first(31), true);
  EXPECT_EQ(m.counters().in_use, 0);
}

TEST_F(BlockManagerTest, DifferentPrefixesDoNotMatch) {
  auto m = make(8);
  const auto a = tokens(32, 1);
  m.release(compute(m, a), a, true);
  auto b = a;
  b[3] = -5;  // differs inside the first block
  const auto match = m.acquire_prefix(b, 31);
  EXPECT_EQ(match.tokens, 3);  // the 3 equal positions, copied
  m.release(match.blocks, std::span(b).first(3), true);
  // Same second block after a different first block: the chain key differs, no match past 0.
  auto c = tokens(32, 2);
  std::copy(a.begin() + 16, a.end(), c.begin() + 16);
  EXPECT_EQ(m.acquire_prefix(c, 31).tokens, 0);
}

TEST_F(BlockManagerTest, EvictsLeastRecentlyUsedDeepestFirstOnlyWhenNeeded) {
  auto m = make(6);
  const auto a = tokens(32, 1), b = tokens(32, 2);
  m.release(compute(m, a), a, true);
  m.release(compute(m, b), b, true);
  EXPECT_EQ(m.counters().cached, 4);
  EXPECT_EQ(m.counters().free, 2);
  // Using a makes b the least recently used.
  auto used = m.acquire_prefix(a, 31);
  m.release(used.blocks, std::span(a).first(31), true);
  copies.clear();
  // Free blocks go first; then b's blocks, its deeper block before its first.
  std::vector<int32_t> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(m.allocate());
  EXPECT_EQ(m.counters().evictions, 2u);
  EXPECT_EQ(m.acquire_prefix(b, 31).tokens, 0);
  EXPECT_GE(m.acquire_prefix(a, 31).tokens, 16);
}

TEST_F(BlockManagerTest, AllocateFailsWhenEverythingIsInUse) {
  auto m = make(2);
  const int a = m.allocate(), b = m.allocate();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_EQ(m.allocate(), -1);
  EXPECT_EQ(m.available(), 0);
  const std::vector<int32_t> both{a, b};
  m.release(both, {}, false);  // nothing computed: freed, not cached
  EXPECT_EQ(m.counters().free, 2);
}

TEST_F(BlockManagerTest, DuplicatesStayPrivateAndAreFreed) {
  auto m = make(8);
  const auto t = tokens(16);
  const auto first = compute(m, t);
  const auto second = compute(m, t);  // computed the same block concurrently
  m.release(first, t, true);
  m.release(second, t, true);
  const auto c = m.counters();
  EXPECT_EQ(c.cached, 1);
  EXPECT_EQ(c.free, 7);
}

TEST_F(BlockManagerTest, FailedSequencesLeaveNothingIndexed) {
  auto m = make(4);
  const auto t = tokens(20);
  std::vector<int32_t> blocks{m.allocate(), m.allocate()};
  m.release(blocks, t, false);
  EXPECT_EQ(m.counters().free, 4);
  EXPECT_EQ(m.acquire_prefix(t, 19).tokens, 0);
}

}  // namespace
// A hybrid model's state slots: each handed to one sequence at a time, all given back at the
// end; a slot given back twice, or never given out, is refused; a model without recurrent
// state has none.
TEST(StateSlots, EachSlotHasOneHolderAndComesBack) {
  StateSlots slots(3);
  EXPECT_EQ(slots.total(), 3);
  const int a = slots.acquire(), b = slots.acquire(), c = slots.acquire();
  EXPECT_EQ(slots.acquire(), -1);
  EXPECT_EQ(std::set<int>({a, b, c}), std::set<int>({0, 1, 2}));
  EXPECT_EQ(slots.available(), 0);
  slots.release(b);
  EXPECT_THROW(slots.release(b), Error);
  EXPECT_EQ(slots.acquire(), b);
  for (const int slot : {a, b, c}) slots.release(slot);
  EXPECT_EQ(slots.available(), 3);
  EXPECT_THROW(slots.release(7), Error);
  EXPECT_THROW(slots.release(-1), Error);
  StateSlots none(0);
  EXPECT_EQ(none.acquire(), -1);
  EXPECT_EQ(none.total(), 0);
}

// Snapshots are found by the prefixes a prompt extends, deepest first, only up to the
// limit; a prefix is stored once; the least recently used (stored or hit) is replaced.
TEST(StateSnapshots, FindsThePrefixesAPromptExtendsDeepestFirst) {
  StateSnapshots snapshots(3);
  const std::vector<int32_t> prompt{5, 6, 7, 8, 9, 10, 11, 12};
  EXPECT_TRUE(snapshots.candidates(prompt, 8).empty());
  const int a = snapshots.store(std::span(prompt).first(3));
  const int b = snapshots.store(std::span(prompt).first(6));
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(snapshots.store(std::span(prompt).first(6)), -1) << "held already";
  EXPECT_TRUE(snapshots.holds(std::span(prompt).first(3)));
  EXPECT_FALSE(snapshots.holds(std::span(prompt).first(4)));
  const auto found = snapshots.candidates(prompt, 7);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].snapshot, b);
  EXPECT_EQ(found[0].tokens, 6);
  EXPECT_EQ(found[1].snapshot, a);
  EXPECT_EQ(found[1].tokens, 3);
  EXPECT_EQ(snapshots.candidates(prompt, 5).size(), 1u) << "the limit";
  const std::vector<int32_t> other{5, 6, 99, 8, 9, 10};
  EXPECT_TRUE(snapshots.candidates(other, 6).empty()) << "a prompt that leaves the prefix";
  const std::vector<int32_t> shorter{5, 6, 7};
  EXPECT_EQ(snapshots.candidates(shorter, 10).size(), 1u);
  // Full: the least recently used goes (a, unless a hit renews it).
  snapshots.use(a);
  const int c = snapshots.store(std::span(prompt).first(1));
  const int d = snapshots.store(std::span(prompt).first(8));
  EXPECT_EQ(d, b) << "b was the least recently used";
  EXPECT_FALSE(snapshots.holds(std::span(prompt).first(6)));
  EXPECT_TRUE(snapshots.holds(std::span(prompt).first(3)));
  EXPECT_NE(c, a);
  const auto counters = snapshots.counters();
  EXPECT_EQ(counters.total, 3);
  EXPECT_EQ(counters.held, 3);
  EXPECT_EQ(counters.saved, 4u);
  EXPECT_EQ(counters.hits, 1u);
  snapshots.discard(d);
  EXPECT_FALSE(snapshots.holds(prompt));
  EXPECT_EQ(snapshots.counters().held, 2);
  EXPECT_EQ(snapshots.store(prompt), d) << "the emptied one is taken first";
  StateSnapshots none(0);
  EXPECT_EQ(none.store(prompt), -1);
  EXPECT_TRUE(none.candidates(prompt, 8).empty());
}

// Interior snapshots (a long prompt's grid) are replaced before any other, each kind least
// recently used first; a hit, or a store of the same prefix as a turn's, makes one a plain one.
TEST(StateSnapshots, InteriorSnapshotsAreReplacedFirst) {
  StateSnapshots snapshots(3);
  const std::vector<int32_t> turn{1, 2, 3, 4}, long_prompt{9, 8, 7, 6, 5, 4, 3, 2};
  const int kept = snapshots.store(turn);  // another conversation's turn, the oldest
  const int grid_a = snapshots.store(std::span(long_prompt).first(2), true);
  const int grid_b = snapshots.store(std::span(long_prompt).first(4), true);
  EXPECT_EQ(snapshots.store(std::span(long_prompt).first(6), true), grid_a) << "the oldest interior one, not the turn";
  EXPECT_EQ(snapshots.store(long_prompt), grid_b) << "a turn's snapshot replaces an interior one too";
  EXPECT_TRUE(snapshots.holds(turn));
  // Now: the turn, the grid point at 6 (interior), the long prompt's end.
  const auto found = snapshots.candidates(long_prompt, 7);
  ASSERT_EQ(found.size(), 1u);
  snapshots.use(found[0].snapshot);  // a hit: kept as a plain one from now on
  const std::vector<int32_t> next{7, 7, 7};
  EXPECT_EQ(snapshots.store(next), kept) << "with no interior one left, the least recently used";
  EXPECT_TRUE(snapshots.holds(std::span(long_prompt).first(6)));
  // A store of a held interior prefix as a plain one promotes it.
  StateSnapshots two(2);
  const int older = two.store(turn);
  two.store(std::span(long_prompt).first(2), true);
  EXPECT_EQ(two.store(std::span(long_prompt).first(2)), -1);
  EXPECT_EQ(two.store(next), older) << "no longer interior: the least recently used goes instead";
  EXPECT_TRUE(two.holds(std::span(long_prompt).first(2)));
}

}  // namespace splash::cache
