// An std::ostream whose every line goes to the process logger at one level,
// for code that reports through an injected stream (tandem-wire's and
// tandem-sim's run(out, err)): main passes one of these as `err`. A line
// that starts with the logger's own "<process>: " loses it (the logger adds it).
#pragma once

#include <ostream>
#include <streambuf>
#include <string>

#include "common/log/log.h"

namespace tandem::common::log {

class LogStream : public std::ostream {
 public:
  explicit LogStream(Level level) : std::ostream(&buf_), buf_(level) {}
  ~LogStream() override { buf_.pubsync(); }

 private:
  class Buf : public std::streambuf {
   public:
    explicit Buf(Level level) : level_(level) {}
    ~Buf() override { emit(); }

   protected:
    int_type overflow(int_type c) override {
      if (c == traits_type::eof()) return traits_type::not_eof(c);
      if (c == '\n')
        emit();
      else
        line_.push_back(static_cast<char>(c));
      return c;
    }
    int sync() override {
      emit();
      return 0;
    }

   private:
    void emit() {
      if (line_.empty()) return;
      const std::string own = logger().name() + ": ";
      std::string_view l(line_);
      if (l.substr(0, own.size()) == own) l.remove_prefix(own.size());
      logger().log(level_, "{}", l);
      line_.clear();
    }
    Level level_;
    std::string line_;
  };
  Buf buf_;
};

}  // namespace tandem::common::log
