// The program of one chapter: CMake builds this file once per chapter with FA_CHAPTER_NUMBER set.
#include "chapter.h"

int main(int argc, char** argv) {
  return fa::chapter_main(FA_CHAPTER_NUMBER, argc, argv);
}
