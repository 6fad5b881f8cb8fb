#define C 1
