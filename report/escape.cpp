// The renderers' escape (report/escape.h).
#include "report/escape.h"

namespace reel::report {

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default: {
        const auto byte = static_cast<unsigned char>(ch);
        if (byte < 0x20 || byte == 0x7f) out += "\xEF\xBF\xBD";  // U+FFFD, the replacement character
        else out += ch;
      }
    }
  }
  return out;
}

}  // namespace reel::report
