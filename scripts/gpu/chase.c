/* Memory latency: a random pointer chase through 256 KB, 8 MB and 256 MB (run on the GPU host). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  size_t sizes[]={1<<18, 8<<20, 256<<20};
  for(int s=0;s<3;s++){
    size_t n=sizes[s]/64; size_t *a=aligned_alloc(64,n*64); size_t *perm=malloc(n*sizeof(size_t));
    for(size_t i=0;i<n;i++)perm[i]=i;
    srand(1); for(size_t i=n-1;i>0;i--){size_t j=((size_t)rand()*RAND_MAX+rand())%(i+1);size_t t=perm[i];perm[i]=perm[j];perm[j]=t;}
    for(size_t i=0;i<n;i++)a[perm[i]*8]=perm[(i+1)%n]*8;
    size_t p=0,steps=4000000; double t0=now();
    for(size_t i=0;i<steps;i++)p=a[p];
    double t=now()-t0; printf("chase %zu KB: %.1f ns/load%s", sizes[s]>>10, t/steps*1e9, s==2?"\n":", ");
    if(p==12345)puts(""); free(a); free(perm);
  }
  return 0;
}
