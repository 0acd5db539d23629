#pragma once
// Optional shared libraries loaded at run time (dlopen) rather than linked, so that one binary starts on a
// system without them and only what needs one fails (docs/install.md, "Optional libraries").
#include <initializer_list>
#include <string>
#include <vector>

namespace ddprun::store::dynlib {

// The names to try in order: the variable's value alone when it is set and not empty (a path or a soname the
// user chose), else the defaults. Pure.
std::vector<std::string> candidates(const char* env_value, std::initializer_list<const char*> defaults);

struct Loaded {
  void* handle = nullptr;  // never closed: the library stays for the process's life
  std::string name;        // the candidate that loaded
  std::string error;       // when none did: the loader's message for each, "; "-separated
};

// dlopen's the first of `names` that loads (RTLD_NOW | RTLD_LOCAL).
Loaded open(const std::vector<std::string>& names);

// The address of `symbol` in `lib`. A missing symbol (an old or foreign library under the expected name)
// makes `lib` unusable: its name is cleared and its error says which symbol; later lookups give null.
void* lookup(Loaded& lib, const char* symbol);

// lookup, cast to the function pointer type F.
template <class F>
void bind(Loaded& lib, const char* symbol, F& out) {
  // POSIX guarantees that a dlsym result converts to a function pointer.
  out = reinterpret_cast<F>(lookup(lib, symbol));
}

}  // namespace ddprun::store::dynlib
