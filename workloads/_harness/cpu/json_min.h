// A small JSON reader/writer for the harness's spec.json and result.json (no third-party code).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace jsonmin {

struct Value {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Value> arr;
  std::map<std::string, Value> obj;

  const Value& at(const std::string& key) const {
    auto it = obj.find(key);
    if (kind != Object || it == obj.end()) throw std::runtime_error("spec: missing field '" + key + "'");
    return it->second;
  }
  bool has(const std::string& key) const { return kind == Object && obj.count(key); }
  double number(const std::string& key, double fallback) const {
    return has(key) && at(key).kind == Number ? at(key).num : fallback;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}
  Value parse() {
    Value v = value();
    ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("spec.json: ") + what + " at offset " + std::to_string(i_));
  }
  void ws() { while (i_ < s_.size() && strchr(" \t\r\n", s_[i_])) ++i_; }
  Value value() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    char c = s_[i_];
    Value v;
    if (c == '{') {
      v.kind = Value::Object; ++i_; ws();
      if (s_[i_] == '}') { ++i_; return v; }
      for (;;) {
        ws(); Value k = value();
        if (k.kind != Value::String) fail("object key must be a string");
        ws(); if (s_[i_++] != ':') fail("expected ':'");
        v.obj[k.str] = value(); ws();
        if (s_[i_] == ',') { ++i_; continue; }
        if (s_[i_] == '}') { ++i_; return v; }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Value::Array; ++i_; ws();
      if (s_[i_] == ']') { ++i_; return v; }
      for (;;) {
        v.arr.push_back(value()); ws();
        if (s_[i_] == ',') { ++i_; continue; }
        if (s_[i_] == ']') { ++i_; return v; }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Value::String; ++i_;
      while (i_ < s_.size() && s_[i_] != '"') {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) { ++i_; v.str += s_[i_] == 'n' ? '\n' : s_[i_]; ++i_; continue; }
        v.str += s_[i_++];
      }
      if (i_ >= s_.size()) fail("unterminated string");
      ++i_;
      return v;
    }
    if (!strncmp(&s_[i_], "true", 4)) { i_ += 4; v.kind = Value::Bool; v.b = true; return v; }
    if (!strncmp(&s_[i_], "false", 5)) { i_ += 5; v.kind = Value::Bool; return v; }
    if (!strncmp(&s_[i_], "null", 4)) { i_ += 4; return v; }
    char* end = nullptr;
    v.num = strtod(&s_[i_], &end);
    if (end == &s_[i_]) fail("unexpected character");
    v.kind = Value::Number;
    i_ = end - s_.c_str();
    return v;
  }
};

inline std::string quote(const std::string& in) {
  std::string out = "\"";
  for (char c : in) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if ((unsigned char)c < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

inline std::string num(double x) {
  if (x != x || x > 1e300 || x < -1e300) return "null";  // NaN/Inf are not JSON
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace jsonmin
