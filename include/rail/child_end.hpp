// ChildEnd: how one child of a parent job ended, as the parent's handler reads it
// (Job::children()): its end (JobEnd: status, reason, errors, when), the queue it ran on, and its
// result, typed by the child's queue (result<R>()).
#pragma once

#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>

#include "rail/dependency.hpp"
#include "rail/error.hpp"
#include "rail/job_end.hpp"

namespace rail {

struct ChildEnd {
  JobEnd<void> end;           // end.id is the child's id; status unknown if never ended
  std::string queue;          // the child's queue
  ChildFailure on_failure{};  // the edge's policy (JobOptions::after)
  std::type_index result_type{typeid(void)};  // the child's queue's result type (void: none)

  /// result<R>(): the child's result: null unless it completed with one. Throws
  /// Error(type_mismatch) if R is not its queue's result type.
  template <class R>
  [[nodiscard]] std::shared_ptr<const R> result() const {
    if (result_type != typeid(R))
      throw Error(ErrorCode::type_mismatch, std::string("ChildEnd::result<")
                                                .append(typeid(R).name())
                                                .append(">() on child ")
                                                .append(std::to_string(end.id))
                                                .append(" of queue '")
                                                .append(queue)
                                                .append("', whose result type is ")
                                                .append(result_type.name())
                                                .append("; expected its queue's result type"));
    return std::static_pointer_cast<const R>(end.result);
  }
};

}  // namespace rail
