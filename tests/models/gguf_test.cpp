// GGUF: metadata and tensor infos of a file written by the `gguf` package, every
// decoder bit-exact against that package's dequantisation, and random corruption.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"

namespace luminal::models {
namespace {

const std::string kMixed = std::string(LUMINAL_FIXTURE_DIR) + "/gguf/mixed.gguf";

TEST(Gguf, ReadsMetadataOfEveryType) {
  GgufFile f(kMixed);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("test.u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("test.i32"), -7);
  EXPECT_EQ(f.get_float("test.f32"), 0.25);
  EXPECT_EQ(std::get<bool>(f.find("test.bool")->v), true);
  EXPECT_EQ(f.get_string("test.string"), "héllo wörld");
  EXPECT_EQ(f.get_int("test.u64"), (int64_t{1} << 40) + 1);
  EXPECT_EQ(f.get_float("test.f64"), -1.5e-300);
  const auto& ints = *std::get<std::shared_ptr<GgufArray>>(f.find("test.ints")->v);
  ASSERT_EQ(ints.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(ints[1].v), -2);
  const auto& strs = *std::get<std::shared_ptr<GgufArray>>(f.find("test.strings")->v);
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(std::get<std::string>(strs[1].v), "bc");
  EXPECT_THROW(f.get_int("test.string"), Error);
  EXPECT_THROW(f.get_string("no.such.key"), Error);
}

TEST(Gguf, DecodersMatchTheReferenceBitForBit) {
  GgufFile f(kMixed);
  int checked = 0;
  for (const char* type :
       {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}) {
    const std::string name = std::string("t.") + type;
    const GgufTensorInfo& info = f.tensor(name);
    EXPECT_EQ(ggml_type_name(info.type), type);
    EXPECT_EQ(info.shape, (std::vector<int64_t>{3, 512}));
    const Buffer got_buf = f.read(name), want_buf = f.read("expected." + name);
    const auto got = got_buf.span<float>();
    const auto want = want_buf.span<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      ASSERT_EQ(a, b) << type << " element " << i << ": " << got[i] << " vs " << want[i];
    }
    ++checked;
  }
  EXPECT_EQ(checked, 11);
  EXPECT_THROW(f.tensor("missing"), Error);
}

TEST(Gguf, BadFilesGiveClearErrors) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  auto write = [&](const std::string& name, const std::string& bytes) {
    const auto p = dir / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  };
  auto expect_error = [](const std::string& path, const char* fragment) {
    try {
      GgufFile f(path);
      ADD_FAILURE() << "expected an error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error((dir / "absent.gguf").string(), "cannot open");
  expect_error(write("magic.gguf", "NOPE0000000000000000000000"), "bad magic");
  std::ifstream in(kMixed, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_error(write("short.gguf", good.substr(0, 100)), "larger than the file");
  expect_error(write("shorter.gguf", good.substr(0, 20)), "truncated");
  expect_error(write("cut.gguf", good.substr(0, good.size() - 10)), "runs past the end");
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  std::ifstream in(kMixed, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Corrupt the header region (metadata and tensor infos), where parsing decisions live.
  const size_t header = 4096;
  std::mt19937 rng(5);
  const auto path = (std::filesystem::path(::testing::TempDir()) / "fuzz.gguf").string();
  int ok = 0, rejected = 0;
  for (int k = 0; k < 1500; ++k) {
    std::string bytes = good;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 8); e < n; ++e) {
      const size_t at = rng() % header;
      bytes[at] = static_cast<char>(rng() % 3 == 0 ? 0xff : rng());
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      GgufFile f(path);
      for (const auto& t : f.tensors())
        if (t.bytes) f.read(t.name);
      ++ok;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 500);
  EXPECT_GT(ok, 10);
}

}  // namespace
}  // namespace luminal::models
