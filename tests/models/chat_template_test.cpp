// Chat formats against the strings each family's published template produces.
#include <gtest/gtest.h>

#include "luminal/error.hpp"
#include "luminal/models/chat_template.hpp"

namespace luminal::models {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(ChatTemplate, Gemma) {
  EXPECT_EQ(render_chat(ChatFormat::Gemma, kConversation),
            "<start_of_turn>user\nBe "
            "brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(render_chat(ChatFormat::ChatML, kConversation),
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
            "Hello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat(ChatFormat::Llama3, {{"user", "Hi!"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<"
            "|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render_chat(ChatFormat::Llama2, kConversation),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
}

TEST(ChatTemplate, FamiliesAndErrors) {
  EXPECT_EQ(chat_format_for("gemma3"), ChatFormat::Gemma);
  EXPECT_EQ(chat_format_for("qwen2"), ChatFormat::ChatML);
  EXPECT_EQ(end_of_turn(ChatFormat::Gemma), "<end_of_turn>");
  EXPECT_THROW(chat_format_for("bert"), Error);
}

}  // namespace
}  // namespace luminal::models
