// `splash bench`: prompt-processing and decode speed on this machine, beside the decode
// ceiling (weight bytes read per token over measured memory bandwidth).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "model/sequence.h"
#include "app/model_loading.h"
#include "common/error.h"
#include "engine/chat_request.h"
#include "engine/generator.h"
#include "engine/output_constraints.h"
#include "kernels/cpu/memory_bandwidth.h"
#if SPLASH_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace splash::app {
namespace {

struct BenchFlags {
  ModelFlags model;
  std::vector<int> prompt_sizes{512, 2048};
  int decode_tokens = 128;
  std::vector<int> decode_depths;  // decode after a prompt of this many tokens
  std::vector<int> parallel;       // aggregate decode of this many sequences at once
  int parallel_prompt = 512;       // each of them after a prompt of this many tokens
  int repetitions = 3;
  bool json = false;
  bool structured = false;
  engine::DraftMode draft = engine::DraftMode::Auto;
};

// The same pseudo-random token ids bench/llamacpp_peer.py feeds the peer engine.
std::vector<int32_t> bench_tokens(int count, int vocab) {
  std::vector<int32_t> ids(count);
  for (int i = 0; i < count; ++i)
    ids[i] = static_cast<int32_t>(100 + (static_cast<uint64_t>(i) * 2654435761ull) % static_cast<uint64_t>(vocab - 100));
  return ids;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A synthetic screenshot-like image (smooth gradients with a sharp-edged grid, so resampling
// has real work); bench/llamacpp_vision_peer.py gives the peer the same pixels.
vision::RgbImage bench_image(int width, int height) {
  vision::RgbImage image{width, height, {}};
  image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) {
      uint8_t* p = image.pixels.data() + (static_cast<size_t>(y) * image.width + x) * 3;
      const bool line = x % 64 == 0 || y % 40 == 0;
      p[0] = line ? 0 : static_cast<uint8_t>(x * 255 / image.width);
      p[1] = line ? 0 : static_cast<uint8_t>(y * 255 / image.height);
      p[2] = line ? 0 : static_cast<uint8_t>((x + y) % 256);
    }
  return image;
}

// Image encoding beside its arithmetic (the multiply-adds of the matmuls and of attention over
// the patches, as GFLOP/s): one view (a preprocessed 512 x 512 square, what the peer's number
// is compared with), and a whole 1280 x 800 screenshot as the model's processor shows it
// (its tiles and the whole image: preprocessing, then every view).
void bench_images(vision::VisionEncoder& encoder, int repetitions, nlohmann::json& report) {
  const auto& v = encoder.info();
  const auto view = vision::idefics3_pixels(bench_image(v.image_size, v.image_size), v.image_size, {});
  const vision::RgbImage screenshot = bench_image(1280, 800);
  encoder.encode_pixels(view);  // warm-up
  std::vector<double> view_runs, screenshot_runs, preprocess_runs;
  int views = 0;
  for (int r = 0; r < repetitions; ++r) {
    view_runs.push_back(seconds_of([&] { encoder.encode_pixels(view); }));
    preprocess_runs.push_back(seconds_of([&] { views = static_cast<int>(vision::idefics3_views(screenshot, v.image_size, {}).views.size()); }));
    screenshot_runs.push_back(seconds_of([&] { encoder.encode(screenshot, {}); }));
  }
  const double n = static_cast<double>(v.image_size / v.patch_size) * (v.image_size / v.patch_size);
  const double d = v.width, patch_in = 3.0 * v.patch_size * v.patch_size, shuffled = d * v.scale_factor * v.scale_factor;
  const double flops = 2.0 * n * patch_in * d + v.layers * (2.0 * n * (4 * d * d + 2 * d * v.ffn) + 4.0 * n * n * d) +
                       2.0 * v.tokens_per_view * shuffled * v.projection_dim;
  const double seconds = median(view_runs);
  fmt::print("{:<28} {:>12.1f} ms  ({}x{} -> {} tokens; {:.1f} GFLOP/s)\n", "image encode, one view", seconds * 1e3,
             v.image_size, v.image_size, v.tokens_per_view, flops / seconds / 1e9);
  fmt::print("{:<28} {:>12.1f} ms  ({} views, {} tokens; preprocessing {:.1f} ms)\n", "image 1280x800, all views",
             median(screenshot_runs) * 1e3, views, views * v.tokens_per_view, median(preprocess_runs) * 1e3);
  report["image_view_encode_ms"] = seconds * 1e3;
  report["image_view_gflops"] = flops / seconds / 1e9;
  report["image_1280x800_ms"] = median(screenshot_runs) * 1e3;
  report["image_1280x800_views"] = views;
  report["image_1280x800_preprocess_ms"] = median(preprocess_runs) * 1e3;
}

// A coding agent's kind of turn: a function given in the prompt, asked back with one change.
const char* kBenchEditPrompt = R"(Here is a function from our repository:

```python
def merge_intervals(intervals, gap=0):
    """Merge overlapping [start, end] intervals; ones closer than `gap` merge too."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1] + gap:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


def total_covered(intervals, gap=0):
    """The length covered by the intervals once merged."""
    return sum(end - start for start, end in merge_intervals(intervals, gap))
```

Rewrite both functions with the parameter `gap` renamed to `tolerance`, and nothing else changed. Reply with the code only.)";

// That turn decoded through the whole generation loop plainly and with the --draft drafter:
// the replies are the same tokens (speculative decoding is exact), so the rates compare.
void bench_drafts(LoadedModel& loaded, engine::DraftMode mode, const std::shared_ptr<model::ModelDraft>& draft,
                  int decode_tokens, int repetitions, nlohmann::json& report) {
  engine::GenerationRequest request;
  const std::vector<chat::ChatMessage> messages{{"user", kBenchEditPrompt}};
  request.prompt = encode_chat(loaded, messages);
  request.sampling.temperature = 0.0f;
  request.max_tokens = std::max(decode_tokens, 256);
  request.stop = loaded.chat->stop_texts();
  std::vector<double> plain_rates, drafted_rates;
  engine::DecodeStats stats;
  size_t tokens = 0;
  model::Sequence sequence(*loaded.model);
  for (int r = 0; r < repetitions; ++r) {
    const auto plain = engine::generate(sequence, loaded.tokenizer, request, nullptr);
    plain_rates.push_back(plain.tokens.size() / plain.decode_seconds);
    stats = {};
    const auto drafter = make_drafter(mode, draft);
    const auto drafted = engine::generate(sequence, loaded.tokenizer, request, nullptr, nullptr, 0, drafter.get(), &stats);
    drafted_rates.push_back(drafted.tokens.size() / drafted.decode_seconds);
    if (drafted.tokens != plain.tokens) fail("bench: the reply with drafts differs from the plain one");
    tokens = plain.tokens.size();
  }
  const double plain_rate = median(plain_rates), drafted_rate = median(drafted_rates);
  fmt::print("{:<28} {:>12.1f}\n", "decode, code edit, plain", plain_rate);
  fmt::print("{:<28} {:>12.1f}\n", fmt::format("decode, code edit, {}", engine::draft_mode_name(mode)), drafted_rate);
  fmt::print("drafts: {:.2f}x plain decode over the same {} tokens; {} of {} guessed tokens kept, {:.2f} tokens a "
             "verifying step\n",
             drafted_rate / plain_rate, tokens, stats.accepted_draft_tokens, stats.draft_tokens,
             stats.verify_steps ? 1.0 + static_cast<double>(stats.accepted_draft_tokens) / stats.verify_steps : 1.0);
  report["decode_code_edit_plain"] = plain_rate;
  report["decode_code_edit_drafted"] = drafted_rate;
  report["code_edit_tokens"] = tokens;
  report["draft_tokens"] = stats.draft_tokens;
  report["accepted_draft_tokens"] = stats.accepted_draft_tokens;
}

// A schema that keeps a reply going (at least 40 entries), so that decode speed with and
// without constraints is compared over the same number of tokens.
const char* kBenchSchema = R"({"type":"object","properties":{"files":{"type":"array","minItems":40,"items":{
  "type":"object","properties":{"path":{"type":"string","maxLength":60},"lines":{"type":"integer","minimum":1},
  "summary":{"type":"string","maxLength":120}},"required":["path","lines","summary"],"additionalProperties":false}}},
  "required":["files"],"additionalProperties":false})";

// Decode through the whole generation loop (sampler, detokenizer, stop strings), free and
// under a JSON Schema, on the same prompt: the cost of constrained decoding as a ratio.
void bench_structured(LoadedModel& loaded, int decode_tokens, int repetitions, nlohmann::json& report) {
  const std::vector<chat::ChatMessage> messages{
      {"user", "List the files of a small Python web project as JSON, with line counts and a summary of each."}};
  engine::ChatRequest chat;
  chat.output_format = {engine::OutputFormat::Kind::JsonSchema, nlohmann::json::parse(kBenchSchema), {}};
  const auto constraints = engine::compile_output_constraints(chat);
  const auto trie = engine::build_token_trie(loaded.tokenizer);
  std::vector<double> free_rates, constrained_rates;
  int masked = 0, constrained_tokens = 0;
  for (int r = 0; r < repetitions; ++r) {
    for (const bool constrained : {false, true}) {
      engine::GenerationRequest request;
      // A reply constrained from its first token does not think (as the server decides).
      request.prompt = encode_chat(loaded, messages, /*thinking=*/!constrained);
      request.sampling.temperature = 0.0f;
      request.max_tokens = decode_tokens;
      request.ignore_end_of_generation = !constrained;
      if (constrained) {
        request.constraints = constraints;
        request.token_trie = trie;
      }
      model::Sequence sequence(*loaded.model);
      const auto result = engine::generate(sequence, loaded.tokenizer, request, nullptr);
      const double rate = result.tokens.size() > 1 ? (result.tokens.size() - 1) / result.decode_seconds : 0.0;
      (constrained ? constrained_rates : free_rates).push_back(rate);
      if (constrained) {
        masked += result.masked_tokens;
        constrained_tokens += static_cast<int>(result.tokens.size());
      }
    }
  }
  const double free_rate = median(free_rates), constrained_rate = median(constrained_rates);
  fmt::print("{:<28} {:>12.1f}\n", "decode, free text", free_rate);
  fmt::print("{:<28} {:>12.1f}\n", "decode, JSON Schema", constrained_rate);
  fmt::print("constrained decode is {:.0f}% of free decode; {} of {} constrained tokens needed the full mask\n",
             100.0 * constrained_rate / free_rate, masked, constrained_tokens);
  report["decode_free_text"] = free_rate;
  report["decode_json_schema"] = constrained_rate;
  report["json_schema_masked_tokens"] = masked;
  report["json_schema_tokens"] = constrained_tokens;
}

// Decode after `depth` tokens of context: what attention over a long prompt costs a step.
// The next token is fed, not sampled (as llama-bench's depth tests do).
void bench_depths(model::Sequence& model, const BenchFlags& flags, const std::vector<int32_t>& tokens,
                  nlohmann::json& report) {
  for (const int depth : flags.decode_depths) {
    model.truncate(0);
    model.forward({tokens.data(), static_cast<size_t>(depth)});
    std::vector<double> runs;
    for (int r = 0; r < flags.repetitions; ++r) {
      if (model.info().state_slots > 0 && model.position() != depth) {  // a recurrent state is recomputed, not rewound
        model.truncate(0);
        model.forward({tokens.data(), static_cast<size_t>(depth)});
      }
      model.truncate(depth);
      runs.push_back(seconds_of([&] {
        for (int i = 0; i < flags.decode_tokens; ++i) model.forward({&tokens[depth + i], 1});
      }));
    }
    const double rate = flags.decode_tokens / median(runs);
    fmt::print("{:<28} {:>12.1f}\n", fmt::format("decode at depth {}", depth), rate);
    report["decode_at_depth"][std::to_string(depth)] = rate;
  }
}

// Aggregate decode of n sequences stepping together (each after its own prompt), as the
// scheduler batches them: tokens per second over all of them. Tokens are fed, not sampled;
// on a GPU each row comes back as its best tokens, as the server's decode steps take it.
void bench_parallel(model::Model& model, const BenchFlags& flags, const std::vector<int32_t>& tokens,
                    nlohmann::json& report) {
  const int prompt = flags.parallel_prompt;
  const int blocks_each = (prompt + flags.decode_tokens + model::kKvBlockTokens) / model::kKvBlockTokens;
  for (const int n : flags.parallel) {
    const int slots = model.info().state_slots;  // a hybrid model: one recurrent state a sequence
    if (n > model::kMaxBatchSequences || n * blocks_each > model.info().kv_blocks || (slots > 0 && n > slots)) {
      fmt::print("{:<28} {:>12}\n", fmt::format("decode {} sequences", n), "(no room)");
      continue;
    }
    std::vector<std::vector<int32_t>> tables(n);
    for (int i = 0; i < n; ++i)
      for (int b = 0; b < blocks_each; ++b) tables[i].push_back(i * blocks_each + b);
    for (int i = 0; i < n; ++i)
      for (int start = 0; start < prompt; start += model.info().max_batch_tokens) {
        const int count = std::min(model.info().max_batch_tokens, prompt - start);
        model::SequenceSlice slice{{tokens.data() + start, static_cast<size_t>(count)}, start, tables[i],
                                   start + count == prompt};
        slice.state_slot = slots > 0 ? i : -1;
        model.forward({&slice, 1});
      }
    std::vector<model::SequenceSlice> slices(n);
    const double seconds = seconds_of([&] {
      for (int step = 0; step < flags.decode_tokens; ++step) {
        for (int i = 0; i < n; ++i) {
          slices[i] = {{&tokens[prompt + step], 1}, prompt + step, tables[i], true};
          // (as the server decodes where the model finds a row's best tokens on its device)
          slices[i].best_only = model.info().best_tokens_on_device;
          slices[i].state_slot = slots > 0 ? i : -1;
        }
        model.forward(slices);
      }
    });
    const double rate = static_cast<double>(n) * flags.decode_tokens / seconds;
    fmt::print("{:<28} {:>12.1f}\n", fmt::format("decode {} sequences", n), rate);
    report["decode_parallel"][std::to_string(n)] = rate;
  }
}

void bench(BenchFlags flags) {
  // The decode runs start after a 16-token prompt: at least that many tokens, whatever the
  // prompt sizes.
  int longest = std::max(16, *std::max_element(flags.prompt_sizes.begin(), flags.prompt_sizes.end()));
  for (const int depth : flags.decode_depths) longest = std::max(longest, depth + flags.decode_tokens + 1);
  // The code-edit turn of bench_drafts: its prompt (~240 tokens on Qwen's tokenizer) and reply.
  if (flags.draft != engine::DraftMode::None) longest = std::max(longest, 512 + std::max(flags.decode_tokens, 256));
  if (!flags.parallel.empty()) {
    longest = std::max(longest, flags.parallel_prompt + flags.decode_tokens + 1);
    flags.model.load.kv_blocks = -1;  // the whole planned pool: room for every sequence
    // (and a hybrid model's recurrent state for each, where memory allows)
    flags.model.load.state_slots = *std::max_element(flags.parallel.begin(), flags.parallel.end());
  }
  if (flags.model.load.max_context == 0)
    flags.model.load.max_context = std::max(longest, 16 + flags.decode_tokens) + 16 + (flags.structured ? 64 : 0);
  const auto budget = flags.model.max_memory_bytes();  // checked before any download
  const auto path = resolve_model_path(flags.model.model);
  const auto draft = open_model_draft(flags.model.draft_model, path, flags.draft, flags.model.load);
  auto loaded = load_model(path, flags.model.load, false, budget, flags.model.mmproj, {}, draft.get());
  if (draft) draft->attach(*loaded->model, loaded->file);
  model::Sequence model(*loaded->model);  // one sequence on the model's KV pool
  const auto& info = model.info();
  print_summary(*loaded, stderr);

  // The ceiling decode is measured against: this machine's read bandwidth, or on the GPU its
  // device-to-device copy bandwidth (bytes read plus written).
  double bandwidth;
  if (info.isa == "cuda") {
#if SPLASH_HAVE_CUDA
    bandwidth = kernels::cuda::measure_copy_bandwidth();
#else
    bandwidth = 0.0;
#endif
  } else {
    kernels::ThreadPool pool(info.threads);
    bandwidth = kernels::measure_read_bandwidth(pool);
  }
  const auto tokens = bench_tokens(longest, info.vocab);
  nlohmann::json report{{"model", info.name}, {"isa", info.isa}, {"threads", info.threads}, {"device", info.device},
                        {"kernel_shapes", info.kernel_shapes}};

  fmt::print("{:<28} {:>12}\n", "test", "tok/s");
  model.truncate(0);
  model.forward({tokens.data(), std::min<size_t>(32, tokens.size())});  // warm-up: page in weights, size scratch
  for (int size : flags.prompt_sizes) {
    std::vector<double> runs;
    for (int r = 0; r < flags.repetitions; ++r) {
      model.truncate(0);
      runs.push_back(seconds_of([&] { model.forward({tokens.data(), static_cast<size_t>(size)}); }));
    }
    const double rate = size / median(runs);
    fmt::print("{:<28} {:>12.1f}\n", fmt::format("prefill {} tokens", size), rate);
    report["prefill"][std::to_string(size)] = rate;
  }

  std::vector<double> runs;
  for (int r = 0; r < flags.repetitions; ++r) {
    model.truncate(0);
    auto logits = model.forward({tokens.data(), 16});
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    runs.push_back(seconds_of([&] {
      for (int i = 0; i < flags.decode_tokens; ++i) {
        if (info.best_tokens_on_device) {  // greedy as the server decodes there: from the row's best tokens
          next = model.forward_best(next).front().id;
          continue;
        }
        logits = model.forward({&next, 1});
        next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
    }));
  }
  const double decode_rate = flags.decode_tokens / median(runs);
  const double ceiling = bandwidth / static_cast<double>(info.decode_read_bytes);
  fmt::print("{:<28} {:>12.1f}\n", fmt::format("decode {} tokens", flags.decode_tokens), decode_rate);
  fmt::print("\nmemory read bandwidth {:.1f} GB/s; a decode step reads {:.1f} MB of weights\n", bandwidth / 1e9,
             info.decode_read_bytes / 1e6);
  fmt::print("decode ceiling {:.1f} tok/s; measured decode is {:.0f}% of it\n", ceiling, 100.0 * decode_rate / ceiling);
  report["decode"] = decode_rate;
  report["decode_ceiling"] = ceiling;
  report["bandwidth_gb_s"] = bandwidth / 1e9;
  report["decode_read_mb"] = info.decode_read_bytes / 1e6;
  bench_depths(model, flags, tokens, report);
  bench_parallel(*loaded->model, flags, tokens, report);
  if (flags.structured) bench_structured(*loaded, flags.decode_tokens, flags.repetitions, report);
  if (flags.draft != engine::DraftMode::None && info.max_logits_per_slice > 1 && info.draft_pass_tokens > 1)
    bench_drafts(*loaded, flags.draft, draft, flags.decode_tokens, flags.repetitions, report);
  if (loaded->vision) bench_images(*loaded->vision, flags.repetitions, report);
  if (flags.json) fmt::print("{}\n", report.dump());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  auto* command = app.add_subcommand("bench", "Measure prompt processing and decode speed");
  add_model_flags(*command, flags->model);
  add_vision_flags(*command, flags->model);  // with --mmproj: also image encoding
  command->add_option("--prompt-sizes", flags->prompt_sizes, "Prompt lengths to time")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 17))
      ->capture_default_str();
  command->add_option("--decode-tokens", flags->decode_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  command->add_option("--decode-depths", flags->decode_depths,
                      "Also time decode after a prompt of each of these lengths (fed tokens, not sampled)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  command->add_option("--parallel", flags->parallel,
                      "Also time aggregate decode of this many sequences at once, each after a prompt of "
                      "--parallel-prompt tokens (fed tokens, not sampled)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  command->add_option("--parallel-prompt", flags->parallel_prompt, "Prompt of each sequence of --parallel")
      ->check(CLI::Range(1, 1 << 17))
      ->capture_default_str();
  command->add_option("--repetitions", flags->repetitions, "Runs per test (the median is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  command->add_flag("--json", flags->json, "Also print a JSON line with the results");
  command->add_flag("--structured", flags->structured,
                    "Also compare decode speed with and without a JSON Schema constraint");
  add_draft_flag(*command, flags->draft, &flags->model.draft_model);
  command->callback([flags] { bench(*flags); });
}

}  // namespace splash::app
