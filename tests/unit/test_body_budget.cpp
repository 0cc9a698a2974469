// The request-body budget: what fits, what is refused, and the per-thread reservation a
// request holds from its headers to the end of its route.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/json_depth.h"
#include "server/body_budget.h"

namespace splash::server {
namespace {

TEST(BodyBudget, CountsInWhatFitsAndRefusesTheRest) {
  BodyBudget budget(100);
  EXPECT_TRUE(budget.try_acquire(60));
  EXPECT_TRUE(budget.try_acquire(40));
  EXPECT_FALSE(budget.try_acquire(1));
  EXPECT_EQ(budget.in_use(), 100u);
  EXPECT_EQ(budget.refused(), 1u);
  budget.release(60);
  EXPECT_TRUE(budget.try_acquire(60));
  EXPECT_FALSE(budget.try_acquire(std::numeric_limits<size_t>::max()));  // no wrap-around
  EXPECT_FALSE(budget.try_acquire(101));
  EXPECT_EQ(budget.refused(), 3u);
}

TEST(BodyBudget, NeverOverCommittedUnderContention) {
  BodyBudget budget(1000);
  std::vector<std::thread> threads;
  std::atomic<int> held{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i)
        if (budget.try_acquire(300)) {
          EXPECT_LE(budget.in_use(), 1000u);
          held.fetch_add(1);
          budget.release(300);
        }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_GT(held.load(), 0);
}

TEST(RequestBody, HeldFromItsHeadersToTheEndOfItsRoute) {
  auto budget = std::make_shared<BodyBudget>(size_t{1} << 20);
  http::Request req;
  req.body = R"({"messages": [{"role": "user", "content": "hi"}]})";
  ASSERT_TRUE(hold_request_body(budget, req.body.size()));
  EXPECT_EQ(budget->in_use(), req.body.size());
  // Before parsing: the text again and its nodes.
  ASSERT_EQ(hold_room_to_parse(req), ParseRoom::Held);
  EXPECT_EQ(budget->in_use(), 2 * req.body.size() + json_node_count(req.body) * kParsedBytesPerJsonNode);
  done_with_request_body(req);
  EXPECT_TRUE(req.body.empty());
  EXPECT_EQ(budget->in_use(), 0u);
  done_with_request_body(req);  // the route said so already; the guard's fallback is harmless
  release_request_body();
  EXPECT_EQ(budget->in_use(), 0u);
}

TEST(RequestBody, ParsingRoomIsBusyOrNeverFits) {
  auto budget = std::make_shared<BodyBudget>(10000);
  http::Request req;
  req.body.assign(3000, ' ');
  req.body.append("[1]");
  ASSERT_TRUE(hold_request_body(budget, req.body.size()));
  ASSERT_TRUE(budget->try_acquire(4000));  // another request's
  EXPECT_EQ(hold_room_to_parse(req), ParseRoom::Busy);
  budget->release(4000);
  EXPECT_EQ(hold_room_to_parse(req), ParseRoom::Held);
  done_with_request_body(req);

  std::string many(1, '[');  // 100 small values
  for (int i = 0; i < 100; ++i) many.append(i ? ",1" : "1");
  many.push_back(']');
  req.body = std::move(many);
  ASSERT_TRUE(hold_request_body(budget, req.body.size()));
  EXPECT_EQ(hold_room_to_parse(req), ParseRoom::NeverFits);  // 100 nodes x 128 > 10000
  done_with_request_body(req);
  EXPECT_EQ(budget->in_use(), 0u);
}

TEST(RequestBody, ANewRequestOnTheThreadDropsALeftoverReservation) {
  auto budget = std::make_shared<BodyBudget>(1000);
  ASSERT_TRUE(hold_request_body(budget, 400));
  ASSERT_TRUE(hold_request_body(budget, 700));  // the first was never given back
  EXPECT_EQ(budget->in_use(), 700u);
  release_request_body();
  EXPECT_EQ(budget->in_use(), 0u);
  EXPECT_TRUE(hold_request_body(budget, 0));  // nothing to hold
  EXPECT_EQ(budget->in_use(), 0u);
}

}  // namespace
}  // namespace splash::server
