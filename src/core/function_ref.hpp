// A non-owning reference to a callable taking no arguments: lets a function that brackets a call
// (on_device) live in a .cpp file without std::function's allocation on the launch path.
#pragma once

#include <memory>
#include <type_traits>

namespace fa {

template <class Signature>
class FunctionRef;

template <class R>
class FunctionRef<R()> {
 public:
  // `f` must outlive the reference (a lambda passed straight to a call does).
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, like the callable it stands for
      : object_(const_cast<void*>(static_cast<void const*>(std::addressof(f)))),
        call_([](void* object) -> R { return (*static_cast<std::remove_reference_t<F>*>(object))(); }) {}

  R operator()() const { return call_(object_); }

 private:
  void* object_;
  R (*call_)(void*);
};

}  // namespace fa
