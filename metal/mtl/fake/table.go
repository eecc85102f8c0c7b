//go:build linux

package fake

// method is what the fake knows of one selector: the classes that respond
// to it, its Objective-C type encoding (return, self, _cmd, arguments) and
// the runtime rules around it.
type method struct {
	recv []string // receiver classes ("+Name" for a class object)
	enc  string   // type encoding, Apple's declaration below
	// owned: the result is +1 (new/alloc/copy/init, "Create" functions),
	// released by the caller; auto: the result is autoreleased (+0) into
	// the thread's innermost pool.
	owned, auto bool
	// pool: Metal's implementation autoreleases its own temporaries, so
	// the message needs an autorelease pool on the thread.
	pool       bool
	since      int  // macOS major version that introduced it (0: long ago)
	metal3     bool // only on GPUs of family Metal3
	deprecated int  // macOS major version that deprecated it (0: never)
}

// Protocol / class names the fake gives its objects.
const (
	nsObject   = "NSObject"
	nsString   = "NSString"
	nsError    = "NSError"
	nsPool     = "NSAutoreleasePool"
	mtlOptions = "MTLCompileOptions"
	mtlDevice  = "MTLDevice"
	mtlQueue   = "MTLCommandQueue"
	mtlCB      = "MTLCommandBuffer"
	mtlEncoder = "MTLComputeCommandEncoder"
	mtlBuffer  = "MTLBuffer"
	mtlLibrary = "MTLLibrary"
	mtlFunc    = "MTLFunction"
	mtlPipe    = "MTLComputePipelineState"
)

var allObjects = []string{nsObject, nsString, nsError, nsPool, mtlOptions, mtlDevice, mtlQueue, mtlCB, mtlEncoder, mtlBuffer, mtlLibrary, mtlFunc, mtlPipe}

// methods is derived by hand from Apple's documented Objective-C
// declarations (developer.apple.com/documentation: Foundation NSObject,
// NSString, NSError, NSAutoreleasePool; Metal MTLDevice, MTLCommandQueue,
// MTLCommandBuffer, MTLComputeCommandEncoder, MTLBuffer, MTLLibrary,
// MTLComputePipelineState, MTLCompileOptions), for exactly the selectors
// metal/mtl sends. Encodings as @encode on arm64: NSUInteger Q, NSInteger
// q, BOOL B, id @, SEL :, char * *, void * ^v, id * ^@, block @?, MTLSize
// {MTLSize=QQQ}; 'r' (const) is ignored when comparing. Enums take their
// declared base type (MTLResourceOptions, MTLResourceUsage,
// MTLLanguageVersion NSUInteger; MTLGPUFamily, MTLMathMode,
// MTLMathFloatingPointFunctions NSInteger).
var methods = map[string]method{
	// NSObject protocol.
	"retain":              {recv: allObjects, enc: "@@:"},                                            // - (instancetype)retain
	"release":             {recv: allObjects, enc: "v@:"},                                            // - (oneway void)release
	"respondsToSelector:": {recv: allObjects, enc: "B@::"},                                           // - (BOOL)respondsToSelector:(SEL)aSelector
	"alloc":               {recv: []string{"+" + nsString}, enc: "@@:", owned: true},                 // + (instancetype)alloc
	"new":                 {recv: []string{"+" + nsPool, "+" + mtlOptions}, enc: "@@:", owned: true}, // + (instancetype)new
	// NSString.
	"initWithUTF8String:": {recv: []string{nsString}, enc: "@@:r*", owned: true}, // - (instancetype)initWithUTF8String:(const char *)s
	"UTF8String":          {recv: []string{nsString}, enc: "r*@:"},               // @property(readonly) const char *UTF8String
	// NSError.
	"localizedDescription": {recv: []string{nsError}, enc: "@@:", auto: true}, // @property(readonly, copy) NSString *localizedDescription
	// NSAutoreleasePool.
	"drain": {recv: []string{nsPool}, enc: "v@:"}, // - (void)drain
	// MTLDevice.
	"name":                         {recv: []string{mtlDevice}, enc: "@@:", auto: true},    // @property(readonly) NSString *name
	"newCommandQueue":              {recv: []string{mtlDevice}, enc: "@@:", owned: true},   // - (id<MTLCommandQueue>)newCommandQueue
	"newBufferWithLength:options:": {recv: []string{mtlDevice}, enc: "@@:QQ", owned: true}, // - (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options
	"newBufferWithBytesNoCopy:length:options:deallocator:": {recv: []string{mtlDevice}, enc: "@@:^vQQ@?", owned: true},           // - (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options deallocator:(void (^)(void *pointer, NSUInteger length))deallocator
	"newLibraryWithSource:options:error:":                  {recv: []string{mtlDevice}, enc: "@@:@@^@", owned: true, pool: true}, // - (id<MTLLibrary>)newLibraryWithSource:(NSString *)source options:(MTLCompileOptions *)options error:(NSError **)error
	"newComputePipelineStateWithFunction:error:":           {recv: []string{mtlDevice}, enc: "@@:@^@", owned: true, pool: true},  // - (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction error:(NSError **)error
	"recommendedMaxWorkingSetSize":                         {recv: []string{mtlDevice}, enc: "Q@:"},                              // @property(readonly) uint64_t recommendedMaxWorkingSetSize
	"hasUnifiedMemory":                                     {recv: []string{mtlDevice}, enc: "B@:"},                              // @property(readonly) BOOL hasUnifiedMemory
	"supportsFamily:":                                      {recv: []string{mtlDevice}, enc: "B@:q"},                             // - (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily
	// MTLCompileOptions.
	"setLanguageVersion:":            {recv: []string{mtlOptions}, enc: "v@:Q"},                 // @property MTLLanguageVersion languageVersion
	"setMathMode:":                   {recv: []string{mtlOptions}, enc: "v@:q", since: 15},      // @property MTLMathMode mathMode (macOS 15)
	"setMathFloatingPointFunctions:": {recv: []string{mtlOptions}, enc: "v@:q", since: 15},      // @property MTLMathFloatingPointFunctions mathFloatingPointFunctions (macOS 15)
	"setFastMathEnabled:":            {recv: []string{mtlOptions}, enc: "v@:B", deprecated: 15}, // @property BOOL fastMathEnabled (deprecated macOS 15: use mathMode)
	// MTLLibrary, MTLComputePipelineState.
	"newFunctionWithName:":          {recv: []string{mtlLibrary}, enc: "@@:@", owned: true, pool: true}, // - (id<MTLFunction>)newFunctionWithName:(NSString *)functionName
	"maxTotalThreadsPerThreadgroup": {recv: []string{mtlPipe}, enc: "Q@:"},                              // @property(readonly) NSUInteger maxTotalThreadsPerThreadgroup
	"threadExecutionWidth":          {recv: []string{mtlPipe}, enc: "Q@:"},                              // @property(readonly) NSUInteger threadExecutionWidth
	// MTLCommandQueue, MTLCommandBuffer.
	"commandBuffer":         {recv: []string{mtlQueue}, enc: "@@:", auto: true, pool: true}, // - (id<MTLCommandBuffer>)commandBuffer
	"computeCommandEncoder": {recv: []string{mtlCB}, enc: "@@:", auto: true, pool: true},    // - (id<MTLComputeCommandEncoder>)computeCommandEncoder
	"commit":                {recv: []string{mtlCB}, enc: "v@:", pool: true},                // - (void)commit
	"waitUntilCompleted":    {recv: []string{mtlCB}, enc: "v@:", pool: true},                // - (void)waitUntilCompleted
	"status":                {recv: []string{mtlCB}, enc: "Q@:"},                            // @property(readonly) MTLCommandBufferStatus status (NSUInteger)
	"error":                 {recv: []string{mtlCB}, enc: "@@:"},                            // @property(readonly) NSError *error
	// MTLComputeCommandEncoder.
	"setComputePipelineState:":                    {recv: []string{mtlEncoder}, enc: "v@:@", pool: true},                          // - (void)setComputePipelineState:(id<MTLComputePipelineState>)state
	"setBuffer:offset:atIndex:":                   {recv: []string{mtlEncoder}, enc: "v@:@QQ", pool: true},                        // - (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index
	"setBytes:length:atIndex:":                    {recv: []string{mtlEncoder}, enc: "v@:r^vQQ", pool: true},                      // - (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index
	"dispatchThreadgroups:threadsPerThreadgroup:": {recv: []string{mtlEncoder}, enc: "v@:{MTLSize=QQQ}{MTLSize=QQQ}", pool: true}, // - (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup
	"useResource:usage:":                          {recv: []string{mtlEncoder}, enc: "v@:@Q", pool: true},                         // - (void)useResource:(id<MTLResource>)resource usage:(MTLResourceUsage)usage
	"useResources:count:usage:":                   {recv: []string{mtlEncoder}, enc: "v@:r^@QQ", pool: true},                      // - (void)useResources:(const id<MTLResource> *)resources count:(NSUInteger)count usage:(MTLResourceUsage)usage
	"endEncoding":                                 {recv: []string{mtlEncoder}, enc: "v@:", pool: true},                           // - (void)endEncoding
	// MTLBuffer.
	"contents":   {recv: []string{mtlBuffer}, enc: "^v@:"},                         // - (void *)contents
	"length":     {recv: []string{mtlBuffer}, enc: "Q@:"},                          // @property(readonly) NSUInteger length
	"gpuAddress": {recv: []string{mtlBuffer}, enc: "Q@:", since: 13, metal3: true}, // @property(readonly) uint64_t gpuAddress (macOS 13, Metal 3)
}

// functions are the C functions the host code binds, by library.
var functions = map[string]struct{ lib, enc string }{
	"objc_msgSend":                 {libobjc, ""},    // variadic: each binding declares its own signature
	"objc_getClass":                {libobjc, "@r*"}, // id objc_getClass(const char *name)
	"sel_registerName":             {libobjc, ":r*"}, // SEL sel_registerName(const char *str)
	"MTLCreateSystemDefaultDevice": {metalFW, "@"},   // id<MTLDevice> MTLCreateSystemDefaultDevice(void)
}

// Library paths and the classes each makes visible once loaded.
const (
	libobjc      = "/usr/lib/libobjc.A.dylib"
	foundationFW = "/System/Library/Frameworks/Foundation.framework/Foundation"
	coreGraphics = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
	metalFW      = "/System/Library/Frameworks/Metal.framework/Metal"
)

var classesOf = map[string][]string{
	foundationFW: {nsObject, nsString, nsError, nsPool},
	metalFW:      {mtlOptions},
}
