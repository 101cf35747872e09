// The one escape of every renderer in report/: text put into HTML or SVG (XML), whether as element
// content or as a quoted attribute value. JSON needs none here: the JSON writers go through
// nlohmann::json, which escapes its strings itself.
#pragma once
#include <string>
#include <string_view>

namespace reel::report {

// `text` safe inside an HTML/XML element or a single- or double-quoted attribute:
//   & < > " '          -> &amp; &lt; &gt; &quot; &#39;
//   tab, newline, CR   -> &#9; &#10; &#13;  (kept, even where an attribute would fold them to spaces)
//   other C0 controls and DEL -> U+FFFD (XML 1.0 allows them in no form, not even as &#1;)
// Bytes from 0x80 up (UTF-8) pass unchanged.
std::string escape_xml(std::string_view text);

}  // namespace reel::report
