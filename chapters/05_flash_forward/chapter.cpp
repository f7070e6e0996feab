// Placeholder while the chapter program is written (ch05a).
namespace {}
