#pragma once
// UTF-8 as the agent meets it in worker output: any bytes, mostly valid text. Pure.
#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun::core {

// Length of the valid UTF-8 sequence at s[i] (1 to 4 bytes), or 0 when the bytes there are not one
// (overlong forms, surrogates, values past U+10FFFF and a sequence cut by the end of `s` included).
std::size_t utf8_length(std::string_view s, std::size_t i);

bool valid_utf8(std::string_view s);

// `s` without a last character that the end of `s` cut (the start of a valid sequence whose other
// bytes have not come yet): what can be shown of a line still being written.
std::string_view without_cut_character(std::string_view s);

// The bytes as lowercase hex digits, and back: from_hex is false (and leaves `out`) when `hex` is not
// an even count of hex digits.
std::string to_hex(std::string_view bytes);
bool from_hex(std::string_view hex, std::string& out);

}  // namespace ddprun::core
