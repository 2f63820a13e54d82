// The JSON reader behind configs, tokenizer.json and safetensors headers: values, order
// and strictness as RFC 8259 has them, clear errors with positions, no crash on hostile
// nesting, and config fields of the wrong type named.
#include <gtest/gtest.h>

#include "models/json.hpp"
#include "testing/expect_error.hpp"

namespace luminal::models {
namespace {

TEST(Json, ReadsEveryKindOfValueInFileOrder) {
  const Json j = parse_json(R"({"z": 1, "a": [true, false, null, -7, 2.5e3, "s\u00e9\ud83d\ude00\n"],
                                "big": 18446744073709551615, "neg": -9223372036854775808, "o": {}})",
                            "test");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.object()[0].first, "z");  // keys keep the file's order
  EXPECT_EQ(j.object()[1].first, "a");
  const JsonArray& a = j.find("a")->array();
  EXPECT_EQ(std::get<bool>(a[0].v), true);
  EXPECT_TRUE(std::holds_alternative<std::nullptr_t>(a[2].v));
  EXPECT_EQ(a[3].integer(), -7);
  EXPECT_DOUBLE_EQ(a[4].number(), 2500.0);
  EXPECT_EQ(a[5].string(), "s\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_FALSE(j.find("big")->is_int());  // beyond int64: a double
  EXPECT_DOUBLE_EQ(j.find("big")->number(), 18446744073709551615.0);
  EXPECT_EQ(j.find("neg")->integer(), INT64_MIN);
  EXPECT_TRUE(j.find("o")->object().empty());
  EXPECT_EQ(j.find("missing"), nullptr);
}

TEST(Json, MalformedTextIsAnErrorWithItsPosition) {
  for (const char* bad : {"{\"a\": 1,}", "[1, 2", "{\"a\" 1}", "// c\n{}", "{} x", "\"\\ud800\"",
                          "\"tab\there\"", "01", "[NaN]", "{'a': 1}", "", "\"\xff\""}) {
    testing::expect_error([&] { parse_json(bad, "f.json"); }, {"f.json", "invalid JSON at byte"});
  }
}

TEST(Json, DeepNestingIsRefusedNotACrash) {
  testing::expect_error([] { parse_json(std::string(100000, '['), "deep.json"); },
                        {"deep.json", "nesting deeper than 64"});
  std::string ok = std::string(60, '[') + std::string(60, ']');
  EXPECT_NO_THROW(parse_json(ok, "ok.json"));
}

TEST(Json, ConfigFieldsOfTheWrongTypeAreNamed) {
  const Json j = parse_json(R"({"layers": "12", "eps": "1e-6", "heads": 4, "none": null})", "c");
  testing::expect_error([&] { int_field(j, "layers", "config.json"); },
                        {"config.json", "'layers'", "not an integer"});
  testing::expect_error([&] { number_field(j, "eps", "config.json", 1e-5); },
                        {"config.json", "'eps'", "not a number"});
  EXPECT_EQ(int_field(j, "heads", "config.json"), 4);
  EXPECT_EQ(int_field(j, "none", "config.json", 7), 7);
  EXPECT_DOUBLE_EQ(number_field(j, "absent", "config.json", 0.5), 0.5);
  testing::expect_error([&] { int_field(j, "absent", "config.json"); }, {"'absent'", "missing"});
}

}  // namespace
}  // namespace luminal::models
